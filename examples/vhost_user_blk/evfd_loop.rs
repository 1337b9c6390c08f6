//! `--loop evfd`: the device on one thread whose only wait is one [`evfd::Epoll`].
//!
//! The epoll holds, for the session with one frontend:
//!
//! - the vhost-user socket (a kernel fd, `data` 0): a readable socket is one protocol
//!   message, handled by `vhost`'s `BackendReqHandler` into [`EvfdBackend`];
//! - each queue's kick fd, adopted as a [`KernelNotifier`] (`data` = queue index + 1) and
//!   registered **edge-triggered** (`IN | ET`): the kernel's eventfd wakes its epoll
//!   entries on every write, so each kick (QEMU's `write(2)`, or KVM's ioeventfd signal)
//!   queues the entry again even though its count is already non-zero, and nothing ever
//!   reads a kick — not the device code, not the epoll. That spares one `read(2)` per
//!   delivered kick against [`Mode::AutoReset`] (whose delivery resets the count). The count
//!   only grows, by 1 a kick: it cannot come near the eventfd limit (2^64 - 2) in the
//!   life of a ring, and a new `SET_VRING_KICK` brings a fresh fd. A kick that lands while
//!   the queue is being served queues the entry again, so the next `wait` returns at once
//!   and the queue is looked at again: no kick is lost.
//!
//! Each queue's call fd is a [`KernelNotifier`] the loop writes (`notify`), only when
//! EVENT_IDX (or the driver's `NO_INTERRUPT` flag without it) says the driver wants it;
//! kicks are suppressed the same way while a queue is being served
//! (`BlockDevice::process_queue`), and a queue's call is made as soon as it is served. A
//! call is one `write(2)`: `notify` may wait (for room below the eventfd limit, which a
//! call fd that its reader empties at each write never nears), so it needs no check first
//! of what a peer did to the shared description's `O_NONBLOCK` (QEMU clears it).
//!
//! Requests complete synchronously (`preadv`/`pwritev` on the image), so there is no
//! completion path and no in-memory notifier to wait for: one wakeup, the requests served,
//! one call. (A device with worker threads would add one in-memory `Notifier` per worker
//! to the same epoll for its completions.)

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

use evfd::{Epoll, Event, Events, KernelNotifier, Mode};
use vhost::vhost_user::message::{
    VhostTransferStateDirection, VhostTransferStatePhase, VhostUserConfigFlags, VhostUserInflight,
    VhostUserLog, VhostUserMemoryRegion, VhostUserProtocolFeatures, VhostUserShMemConfig,
    VhostUserSharedMsg, VhostUserSingleMemoryRegion, VhostUserVringAddrFlags, VhostUserVringState,
};
use vhost::vhost_user::{
    BackendListener, Error as VuError, GpuBackend, Listener, Result as VuResult,
    VhostUserBackendReqHandlerMut,
};
use vhost::VhostUserMemoryRegionBase;
use virtio_bindings::bindings::virtio_ring::VIRTIO_RING_F_EVENT_IDX;
use virtio_queue::{Queue, QueueT};
use vm_memory::{GuestAddress, GuestMemoryMmap, GuestRegionMmap};

use crate::device::{BlockDevice, Mem, MAX_QUEUE_SIZE, VHOST_USER_F_PROTOCOL_FEATURES};

/// Epoll `data` of the vhost-user socket.
const SOCKET: u64 = 0;

/// Memory regions a frontend may add one by one (`CONFIGURE_MEM_SLOTS`); as many as
/// `vhost-user-backend` takes, under QEMU's 512.
const MAX_MEM_SLOTS: u64 = 509;

/// One virtqueue's state.
struct Vring {
    queue: Queue,
    /// Registered in the session's epoll while the ring is started.
    kick: Option<KernelNotifier>,
    call: Option<KernelNotifier>,
    err: Option<KernelNotifier>,
    /// `SET_VRING_ENABLE` (rings start enabled when protocol features were not acked).
    enabled: bool,
    /// The guest broke the ring: not served until the frontend sets it up again.
    broken: bool,
}

impl Vring {
    fn new() -> Vring {
        Vring {
            // MAX_QUEUE_SIZE is a power of two: `Queue::new` cannot fail on it.
            queue: Queue::new(MAX_QUEUE_SIZE).unwrap_or_else(|_| unreachable!()),
            kick: None,
            call: None,
            err: None,
            enabled: false,
            broken: false,
        }
    }
}

/// Guest address translation for `SET_VRING_ADDR` (which gives frontend virtual addresses).
struct Mapping {
    vmm_addr: u64,
    size: u64,
    gpa: u64,
}

/// One guest memory region a frontend sent (`SET_MEM_TABLE`, `ADD_MEM_REG`): mapped from
/// its fd, and its frontend-address translation.
fn map_region(r: &VhostUserMemoryRegion, file: File) -> VuResult<(GuestRegionMmap, Mapping)> {
    let region = GuestRegionMmap::new(r.mmap_region(file)?, GuestAddress(r.guest_phys_addr))
        .ok_or(VuError::InvalidParam)?;
    let mapping = Mapping {
        vmm_addr: r.user_addr,
        size: r.memory_size,
        gpa: r.guest_phys_addr,
    };
    Ok((region, mapping))
}

/// The vhost-user protocol state of one session, and the queues it drives.
pub struct EvfdBackend {
    dev: Arc<BlockDevice>,
    ep: Epoll,
    mem: Option<Mem>,
    mappings: Vec<Mapping>,
    vrings: Vec<Vring>,
    owned: bool,
    acked_features: u64,
    acked_protocol: u64,
}

fn invalid(what: &'static str) -> VuError {
    VuError::InvalidOperation(what)
}

fn io_err(e: io::Error) -> VuError {
    VuError::ReqHandlerError(e)
}

impl EvfdBackend {
    /// A fresh device state whose kicks go into `ep`.
    pub fn new(dev: Arc<BlockDevice>, ep: Epoll) -> EvfdBackend {
        let vrings = (0..dev.num_queues()).map(|_| Vring::new()).collect();
        EvfdBackend {
            dev,
            ep,
            mem: None,
            mappings: Vec::new(),
            vrings,
            owned: false,
            acked_features: 0,
            acked_protocol: 0,
        }
    }

    fn vring(&mut self, index: u32) -> VuResult<&mut Vring> {
        self.vrings
            .get_mut(index as usize)
            .ok_or(VuError::InvalidParam)
    }

    fn event_idx(&self) -> bool {
        self.acked_features & (1 << VIRTIO_RING_F_EVENT_IDX) != 0
    }

    /// Stop a ring: out of the epoll (dropping the kick removes it), no more calls.
    fn stop(&mut self, index: usize) {
        if let Some(v) = self.vrings.get_mut(index) {
            v.kick = None;
            v.call = None;
            v.queue.set_ready(false);
        }
    }

    /// Serve queue `index` if it is started, enabled, not broken and memory is mapped, and
    /// call it if its driver wants that. Called whenever it may have become servable.
    pub fn serve(&mut self, index: usize) {
        if self.process(index) {
            self.call(index);
        }
    }

    /// A ring starts (its kick fd set, or the ring enabled): it is served at once (requests
    /// may be waiting in it, kicked to a backend before this one), and called once if it
    /// ever completed a request, whether or not this serve wants a call.
    /// A backend that died between putting a request in the used ring and its call (SIGKILL,
    /// a crash; QEMU reconnects to the next one) leaves the driver waiting for a call that
    /// nobody else will make: with one request in flight per queue, for ever. The new
    /// backend cannot tell whether that happened, and a call the driver did not need costs
    /// it one look at the used ring; so every start of a ring whose used index is not 0
    /// (a ring the driver set up fresh has 0) makes one.
    fn start(&mut self, index: usize) {
        let owed = self.servable(index) && self.vrings[index].queue.next_used() != 0;
        if self.process(index) || owed {
            self.call(index);
        }
    }

    /// Whether queue `index` is started, enabled and not broken, with memory mapped.
    fn servable(&self, index: usize) -> bool {
        let Some(v) = self.vrings.get(index) else {
            return false;
        };
        self.mem.is_some() && v.kick.is_some() && v.enabled && !v.broken && v.queue.ready()
    }

    /// Serve queue `index` as [`serve`](Self::serve) does, and say whether its driver wants
    /// a call.
    fn process(&mut self, index: usize) -> bool {
        if !self.servable(index) {
            return false;
        }
        let (Some(mem), Some(v)) = (self.mem.as_ref(), self.vrings.get_mut(index)) else {
            return false;
        };
        match self.dev.process_queue(index, &mut v.queue, mem) {
            Ok(wanted) => wanted,
            Err(e) => {
                eprintln!("vhost_user_blk: queue {index} broken by the guest: {e}");
                v.broken = true;
                if let Some(err) = &v.err {
                    let _ = err.notify();
                }
                false
            }
        }
    }

    /// Signal queue `index`'s call fd, if it has one: one `write(2)`.
    fn call(&self, index: usize) {
        if let Some(call) = self.vrings.get(index).and_then(|v| v.call.as_ref()) {
            if dies_here() {
                eprintln!("vhost_user_blk: VUBLK_DIE_BEFORE_CALL: exiting in place of a call");
                std::process::exit(3);
            }
            if let Err(e) = call.notify() {
                eprintln!("vhost_user_blk: queue {index}: call: {e}");
            }
        }
    }

    fn vmm_to_gpa(&self, va: u64) -> VuResult<u64> {
        self.mappings
            .iter()
            .find(|m| va >= m.vmm_addr && va - m.vmm_addr < m.size)
            .map(|m| va - m.vmm_addr + m.gpa)
            .ok_or(VuError::InvalidParam)
    }
}

impl VhostUserBackendReqHandlerMut for EvfdBackend {
    fn set_owner(&mut self) -> VuResult<()> {
        if self.owned {
            return Err(invalid("already owned"));
        }
        self.owned = true;
        Ok(())
    }

    fn reset_owner(&mut self) -> VuResult<()> {
        self.owned = false;
        self.acked_features = 0;
        self.acked_protocol = 0;
        Ok(())
    }

    fn reset_device(&mut self) -> VuResult<()> {
        for i in 0..self.vrings.len() {
            self.stop(i);
            self.vrings[i] = Vring::new();
        }
        self.acked_features = 0;
        Ok(())
    }

    fn get_features(&mut self) -> VuResult<u64> {
        Ok(self.dev.features())
    }

    fn set_features(&mut self, features: u64) -> VuResult<()> {
        if features & !self.dev.features() != 0 {
            return Err(VuError::InvalidParam);
        }
        self.acked_features = features;
        let event_idx = self.event_idx();
        let auto_enable = features & VHOST_USER_F_PROTOCOL_FEATURES == 0;
        for v in &mut self.vrings {
            v.queue.set_event_idx(event_idx);
            if auto_enable {
                v.enabled = true;
            }
        }
        Ok(())
    }

    fn set_mem_table(
        &mut self,
        ctx: &[VhostUserMemoryRegion],
        files: Vec<File>,
        postcopy: Option<bool>,
    ) -> VuResult<Option<Vec<VhostUserMemoryRegionBase>>> {
        if postcopy.is_some() {
            return Err(invalid("postcopy is not supported"));
        }
        let mut regions = Vec::new();
        let mut mappings = Vec::new();
        for (r, file) in ctx.iter().zip(files) {
            let (region, mapping) = map_region(r, file)?;
            regions.push(region);
            mappings.push(mapping);
        }
        let mem = GuestMemoryMmap::from_regions(regions).map_err(|_| VuError::InvalidParam)?;
        self.mem = Some(mem);
        self.mappings = mappings;
        Ok(None)
    }

    fn set_vring_num(&mut self, index: u32, num: u32) -> VuResult<()> {
        let v = self.vring(index)?;
        let num = u16::try_from(num).map_err(|_| VuError::InvalidParam)?;
        v.queue.try_set_size(num).map_err(|_| VuError::InvalidParam)
    }

    fn set_vring_addr(
        &mut self,
        index: u32,
        _flags: VhostUserVringAddrFlags,
        descriptor: u64,
        used: u64,
        available: u64,
        _log: u64,
    ) -> VuResult<()> {
        let desc = self.vmm_to_gpa(descriptor)?;
        let avail = self.vmm_to_gpa(available)?;
        let used = self.vmm_to_gpa(used)?;
        let mem = self.mem.as_ref().ok_or(invalid("no memory table"))?;
        let v = self
            .vrings
            .get_mut(index as usize)
            .ok_or(VuError::InvalidParam)?;
        let q = &mut v.queue;
        q.try_set_desc_table_address(GuestAddress(desc))
            .and_then(|()| q.try_set_avail_ring_address(GuestAddress(avail)))
            .and_then(|()| q.try_set_used_ring_address(GuestAddress(used)))
            .map_err(|_| VuError::InvalidParam)?;
        let used_idx = q
            .used_idx(mem, std::sync::atomic::Ordering::Acquire)
            .map_err(|_| VuError::InvalidParam)?;
        q.set_next_used(used_idx.0);
        v.broken = false;
        Ok(())
    }

    fn set_vring_base(&mut self, index: u32, base: u32) -> VuResult<()> {
        let v = self.vring(index)?;
        v.queue
            .set_next_avail(u16::try_from(base).map_err(|_| VuError::InvalidParam)?);
        Ok(())
    }

    fn get_vring_base(&mut self, index: u32) -> VuResult<VhostUserVringState> {
        let next_avail = self.vring(index)?.queue.next_avail();
        self.stop(index as usize);
        Ok(VhostUserVringState::new(index, u32::from(next_avail)))
    }

    fn set_vring_kick(&mut self, index: u8, fd: Option<File>) -> VuResult<()> {
        let Some(fd) = fd else {
            return Err(invalid("polling mode (no kick fd) is not supported"));
        };
        // Counter mode, edge-triggered: nothing reads the kick (module docs). The kernel
        // polls the fd at EPOLL_CTL_ADD, so a kick that came before is delivered too.
        let kick =
            KernelNotifier::from_owned_fd(OwnedFd::from(fd), Mode::Counter).map_err(io_err)?;
        self.ep
            .add(&kick, Events::IN | Events::ET, u64::from(index) + 1)
            .map_err(io_err)?;
        let mem_ok = self.mem.is_some();
        let v = self.vring(u32::from(index))?;
        v.kick = Some(kick); // drops (and unregisters) the previous kick, if any
        v.queue.set_ready(true);
        if let Some(mem) = self.mem.as_ref().filter(|_| mem_ok) {
            let v = &mut self.vrings[index as usize];
            if !v.queue.is_valid(mem) {
                eprintln!("vhost_user_blk: queue {index}: rings outside guest memory");
                v.broken = true;
            }
        }
        self.start(index as usize);
        Ok(())
    }

    fn set_vring_call(&mut self, index: u8, fd: Option<File>) -> VuResult<()> {
        let call = match fd {
            Some(fd) => Some(
                KernelNotifier::from_owned_fd(OwnedFd::from(fd), Mode::Counter).map_err(io_err)?,
            ),
            None => None,
        };
        self.vring(u32::from(index))?.call = call;
        Ok(())
    }

    fn set_vring_err(&mut self, index: u8, fd: Option<File>) -> VuResult<()> {
        let err = match fd {
            Some(fd) => Some(
                KernelNotifier::from_owned_fd(OwnedFd::from(fd), Mode::Counter).map_err(io_err)?,
            ),
            None => None,
        };
        self.vring(u32::from(index))?.err = err;
        Ok(())
    }

    fn get_protocol_features(&mut self) -> VuResult<VhostUserProtocolFeatures> {
        Ok(VhostUserProtocolFeatures::CONFIG
            | VhostUserProtocolFeatures::MQ
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS)
    }

    fn set_protocol_features(&mut self, features: u64) -> VuResult<()> {
        self.acked_protocol = features;
        Ok(())
    }

    fn get_queue_num(&mut self) -> VuResult<u64> {
        Ok(u64::from(self.dev.num_queues()))
    }

    fn set_vring_enable(&mut self, index: u32, enable: bool) -> VuResult<()> {
        if self.acked_features & VHOST_USER_F_PROTOCOL_FEATURES == 0 {
            return Err(invalid("SET_VRING_ENABLE without protocol features"));
        }
        self.vring(index)?.enabled = enable;
        if enable {
            self.start(index as usize);
        }
        Ok(())
    }

    fn get_config(
        &mut self,
        offset: u32,
        size: u32,
        _f: VhostUserConfigFlags,
    ) -> VuResult<Vec<u8>> {
        self.dev
            .read_config(offset, size)
            .ok_or(VuError::InvalidParam)
    }

    fn set_config(&mut self, _offset: u32, _buf: &[u8], _f: VhostUserConfigFlags) -> VuResult<()> {
        Err(invalid("the config space is read-only"))
    }

    fn set_gpu_socket(&mut self, _gpu: GpuBackend) -> VuResult<()> {
        Err(invalid("not a GPU"))
    }

    fn get_shared_object(&mut self, _uuid: VhostUserSharedMsg) -> VuResult<File> {
        Err(invalid("no shared objects"))
    }

    fn get_inflight_fd(&mut self, _i: &VhostUserInflight) -> VuResult<(VhostUserInflight, File)> {
        Err(invalid("no inflight tracking"))
    }

    fn set_inflight_fd(&mut self, _i: &VhostUserInflight, _file: File) -> VuResult<()> {
        Err(invalid("no inflight tracking"))
    }

    fn get_max_mem_slots(&mut self) -> VuResult<u64> {
        Ok(MAX_MEM_SLOTS)
    }

    /// `CONFIGURE_MEM_SLOTS`: one region at a time (QEMU sends its memory this way, rather
    /// than with `SET_MEM_TABLE`, once the protocol feature is acked).
    fn add_mem_region(
        &mut self,
        r: &VhostUserSingleMemoryRegion,
        file: File,
        postcopy: Option<bool>,
    ) -> VuResult<Option<VhostUserMemoryRegionBase>> {
        if postcopy.is_some() {
            return Err(invalid("postcopy is not supported"));
        }
        if self.mappings.len() as u64 >= MAX_MEM_SLOTS {
            return Err(invalid("no memory slot left"));
        }
        let (region, mapping) = map_region(r, file)?;
        // A new collection with the region added (an overlapping one is refused); the old
        // one stays in place if it is.
        let mem = self
            .mem
            .clone()
            .unwrap_or_default()
            .insert_region(Arc::new(region))
            .map_err(|_| VuError::InvalidParam)?;
        self.mem = Some(mem);
        self.mappings.push(mapping);
        let (gpa, size) = (r.guest_phys_addr, r.memory_size); // a packed struct's fields
        eprintln!(
            "vhost_user_blk: memory region added at {gpa:#x}, {size} bytes ({} regions)",
            self.mappings.len()
        );
        Ok(None)
    }

    fn remove_mem_region(&mut self, r: &VhostUserSingleMemoryRegion) -> VuResult<()> {
        let Some(mem) = self.mem.as_ref() else {
            return Err(invalid("no memory region"));
        };
        let (mem, _) = mem
            .remove_region(GuestAddress(r.guest_phys_addr), r.memory_size)
            .map_err(|_| VuError::InvalidParam)?;
        self.mem = Some(mem);
        self.mappings.retain(|m| m.gpa != r.guest_phys_addr);
        Ok(())
    }

    fn set_device_state_fd(
        &mut self,
        _d: VhostTransferStateDirection,
        _p: VhostTransferStatePhase,
        _fd: File,
    ) -> VuResult<Option<File>> {
        Err(invalid("no migration"))
    }

    fn check_device_state(&mut self) -> VuResult<()> {
        Err(invalid("no migration"))
    }

    fn get_shmem_config(&mut self) -> VuResult<VhostUserShMemConfig> {
        Err(invalid("no shared memory regions"))
    }

    fn set_log_base(&mut self, _log: &VhostUserLog, _file: File) -> VuResult<()> {
        Err(invalid("no dirty logging"))
    }
}

/// A crash at the worst moment, for the QEMU checks (`scripts/qemu-vhost-user.sh`,
/// `died-before-call`): with `VUBLK_DIE_BEFORE_CALL=N` in the environment, the process
/// exits in place of its `N`th call, after that call's requests went into the used ring.
fn dies_here() -> bool {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::OnceLock;
    static AT: OnceLock<Option<u64>> = OnceLock::new();
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let at = AT.get_or_init(|| std::env::var("VUBLK_DIE_BEFORE_CALL").ok()?.parse().ok());
    at.is_some_and(|n| CALLS.fetch_add(1, Relaxed) + 1 == n)
}

/// Serve frontends on `listener`, one at a time, forever.
pub fn run(listener: &mut Listener, dev: Arc<BlockDevice>) -> ! {
    loop {
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| session(listener, &dev)));
        eprintln!("vhost_user_blk: served per queue: {:?}", dev.take_served());
        match outcome {
            Ok(Ok(())) => eprintln!("vhost_user_blk: frontend gone; waiting for the next"),
            Ok(Err(e)) => eprintln!("vhost_user_blk: session ended: {e}; waiting for the next"),
            Err(_) => eprintln!("vhost_user_blk: session panicked; reset, waiting for the next"),
        }
    }
}

/// One frontend, from `accept` to its disconnect.
fn session(listener: &mut Listener, dev: &Arc<BlockDevice>) -> io::Result<()> {
    let ep = Epoll::new();
    let backend = Arc::new(Mutex::new(EvfdBackend::new(Arc::clone(dev), ep.clone())));
    let mut req = {
        let mut bl = BackendListener::new(listener, Arc::clone(&backend)).map_err(vu_io)?;
        loop {
            if let Some(r) = bl.accept().map_err(vu_io)? {
                break r;
            }
        }
    };
    eprintln!("vhost_user_blk: frontend connected (evfd loop)");
    let sock = req.try_clone_connection()?;
    ep.add(&sock.as_fd(), Events::IN, SOCKET)?;
    let mut evs = [Event::default(); 16];
    loop {
        let n = match ep.wait(&mut evs, None) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        for ev in &evs[..n] {
            match ev.data {
                SOCKET => {
                    if let Err(e) = req.handle_request() {
                        return match e {
                            VuError::Disconnected | VuError::PartialMessage => Ok(()),
                            VuError::SocketBroken(_) => Ok(()),
                            e => Err(vu_io(e)),
                        };
                    }
                }
                // Served, then called at once if its driver wants it: a call is one
                // `write(2)`, so nothing is gained by holding it for the next queue.
                q => lock(&backend).serve((q - 1) as usize),
            }
        }
    }
}

fn lock(b: &Mutex<EvfdBackend>) -> std::sync::MutexGuard<'_, EvfdBackend> {
    // Only this thread locks it (the protocol handler runs on it too): never poisoned by
    // another thread, and a panic of this one ends the session with the state.
    b.lock().unwrap_or_else(|p| p.into_inner())
}

fn vu_io(e: VuError) -> io::Error {
    io::Error::other(e.to_string())
}
