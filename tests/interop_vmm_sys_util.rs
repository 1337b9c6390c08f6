//! Feature `vmm-sys-util`: evfd's `KernelNotifier` handed to rust-vmm APIs and back.
//!
//! - vmm-sys-util 0.15 itself: `EventFd`, `new_event_consumer_and_notifier`'s
//!   `EventConsumer` / `EventNotifier`, both ways, on the same open file description.
//! - vhost-user-backend 0.24's `VringT::set_kick` / `set_call` / `get_kick` / `get_call` /
//!   `read_kick` / `signal_used_queue` on a `VringRwLock`.
//! - A whole vhost-user session: vhost 0.18's `Frontend::set_vring_kick` / `set_vring_call`
//!   given `EventFd`s made from evfd notifiers, a `VhostUserDaemon` whose backend's
//!   `exit_event` hands out evfd's pair, each kick seen by the backend's worker and each call
//!   delivered once by an evfd `Epoll`.
#![cfg(target_os = "linux")]

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};
use rustix::fs::OFlags;
use vhost::vhost_user::message::VhostUserProtocolFeatures;
use vhost::vhost_user::{Backend, Frontend, Listener, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use vhost_user_backend::{VhostUserBackendMut, VhostUserDaemon, VringRwLock, VringT};
use vm_memory::{FileOffset, GuestAddress, GuestMemoryAtomic, GuestMemoryBackend, GuestMemoryMmap};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK, EFD_SEMAPHORE};

const LONG: Duration = Duration::from_secs(5);

fn nonblocking(fd: impl AsFd) -> bool {
    rustix::fs::fcntl_getfl(fd)
        .unwrap()
        .contains(OFlags::NONBLOCK)
}

/// Whether this kernel shows `eventfd-semaphore` in fdinfo (Linux 6.4+).
fn kernel_shows_semaphore() -> bool {
    let e = EventFd::new(0).unwrap();
    std::fs::read_to_string(format!("/proc/self/fdinfo/{}", e.as_raw_fd()))
        .is_ok_and(|s| s.contains("eventfd-semaphore"))
}

#[test]
fn event_fd_both_ways_same_description() -> io::Result<()> {
    // rust-vmm → evfd: a blocking EventFd with a count already in it.
    let efd = EventFd::new(0)?;
    efd.write(2)?;
    assert!(!nonblocking(efd.try_clone()?.into_owned()));
    let k = KernelNotifier::try_from(efd.try_clone()?)?;
    assert_eq!(k.mode(), Mode::Counter);
    // The same open file description: adoption's O_NONBLOCK shows on rust-vmm's fd, and
    // the count written before the conversion is there (not copied: a later write adds).
    assert!(nonblocking(efd.try_clone()?.into_owned()));
    efd.write(3)?;
    assert_eq!(k.count()?, 5);
    assert_eq!(k.read()?, 5);
    assert_eq!(
        efd.read().unwrap_err().kind(),
        io::ErrorKind::WouldBlock,
        "the rust-vmm side reads the count evfd took"
    );

    // evfd → rust-vmm: the fd moves; what evfd's clone writes, the EventFd reads.
    let theirs = EventFd::from(k.try_clone()?);
    k.write(7)?;
    assert_eq!(theirs.read()?, 7);
    theirs.write(1)?;
    assert_eq!(k.read()?, 1);
    // `From` moves the very fd: its number does not change.
    let fd = k.as_raw_fd();
    let theirs = EventFd::from(k);
    assert_eq!(theirs.as_raw_fd(), fd);
    Ok(())
}

/// `EventFd`/`EventConsumer` have no `into_owned`; tests take the fd through `IntoRawFd`.
trait IntoOwnedForTest {
    fn into_owned(self) -> OwnedFd;
}
impl<T: IntoRawFd> IntoOwnedForTest for T {
    fn into_owned(self) -> OwnedFd {
        // SAFETY: `into_raw_fd` gives up sole ownership of an open fd.
        unsafe { OwnedFd::from_raw_fd(self.into_raw_fd()) }
    }
}

#[test]
fn semaphore_flag_travels_with_the_fd() -> io::Result<()> {
    let sem = EventFd::new(EFD_SEMAPHORE | EFD_NONBLOCK)?;
    sem.write(3)?;
    let k = KernelNotifier::try_from(sem.try_clone()?)?;
    // The fd's flag decides what a read takes, whatever the kernel shows.
    assert_eq!(k.read()?, 1);
    if kernel_shows_semaphore() {
        assert_eq!(k.mode(), Mode::Semaphore);
        let e = KernelNotifier::from_event_fd(sem.try_clone()?, Mode::Counter).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let e = KernelNotifier::from_event_fd(EventFd::new(0)?, Mode::Semaphore).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    } else {
        println!("kernel does not show eventfd-semaphore: mode checks not exercised");
    }
    let k = KernelNotifier::from_event_fd(sem, Mode::Semaphore)?;
    assert_eq!(k.read()?, 1);
    assert_eq!(k.count()?, 1);
    Ok(())
}

#[test]
fn split_pair_both_ways() -> io::Result<()> {
    // rust-vmm's pair → evfd, as the kick of a device: AutoReset in an evfd Epoll beside an
    // in-memory notifier.
    let (consumer, notifier) = new_event_consumer_and_notifier(EventFlag::CLOEXEC)?;
    let kick = KernelNotifier::from_event_consumer(consumer, Mode::AutoReset)?;
    assert!(kick.is_cloexec());
    let mem = Notifier::builder().mode(Mode::AutoReset).build()?;
    let ep = Epoll::new();
    ep.add(&kick, Events::IN, 1)?;
    ep.add(&mem, Events::IN, 2)?;
    for _ in 0..3 {
        notifier.notify()?; // vmm-sys-util's write of 1
    }
    mem.notify()?;
    let mut evs = [Event::default(); 4];
    let n = ep.wait(&mut evs, Some(LONG))?;
    let mut got: Vec<_> = evs[..n].iter().map(|e| (e.data, e.events.bits())).collect();
    got.sort();
    let inb = Events::IN.bits();
    assert_eq!(got, [(1, inb), (2, inb)]);
    assert_eq!(
        kick.count()?,
        0,
        "AutoReset: the delivery took the three writes"
    );
    assert_eq!(ep.wait(&mut evs, Some(Duration::from_millis(20)))?, 0);

    // The notifier half adopted too (an eventfd has no read or write end).
    let call = KernelNotifier::from_event_notifier(notifier, Mode::Counter)?;
    call.write(4)?;
    assert!(ep.wait(&mut evs, Some(LONG))? == 1 && evs[0].data == 1);

    // evfd → rust-vmm: the pair vhost-user-backend wants, over this notifier's eventfd.
    let exit = KernelNotifier::new(Mode::Counter)?;
    let (consumer, notifier) = exit.event_consumer_and_notifier()?;
    notifier.notify()?;
    assert_eq!(exit.count()?, 1);
    exit.write(1)?;
    consumer.consume()?; // reads both
    assert_eq!(exit.count()?, 0);
    // Both halves came out of `O_NONBLOCK` evfd: the consumer reads WouldBlock at 0.
    assert_eq!(
        consumer.consume().unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    // And they go back.
    let again = KernelNotifier::try_from(consumer)?;
    let again_w = KernelNotifier::try_from(notifier)?;
    again_w.write(9)?;
    assert_eq!(again.read()?, 9);
    Ok(())
}

#[test]
fn a_pipe_half_is_refused() -> io::Result<()> {
    let (rd, wr) = rustix::pipe::pipe()?;
    // SAFETY: each fd is open and owned by the `OwnedFd` given up here.
    let consumer = unsafe { EventConsumer::from_raw_fd(rd.into_raw_fd()) };
    // SAFETY: as above.
    let notifier = unsafe { EventNotifier::from_raw_fd(wr.into_raw_fd()) };
    for e in [
        KernelNotifier::try_from(consumer).unwrap_err(),
        KernelNotifier::from_event_notifier(notifier, Mode::Counter).unwrap_err(),
    ] {
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
    Ok(())
}

/// vhost-user-backend's vring, given evfd's fds the way its request handler gives them
/// (`Option<File>`), and read back through `get_kick` / `get_call`.
#[test]
fn vring_kick_and_call() -> io::Result<()> {
    let mem = GuestMemoryAtomic::new(GuestMemoryMmap::<()>::new());
    let vring = VringRwLock::new(mem, 256).unwrap();
    vring.set_enabled(true);

    let kick = KernelNotifier::new(Mode::AutoReset)?;
    let call = KernelNotifier::new(Mode::AutoReset)?;
    vring.set_kick(Some(File::from(OwnedFd::from(kick.try_clone()?))));
    vring.set_call(Some(File::from(OwnedFd::from(call.try_clone()?))));

    // A kick written by evfd is consumed by the vring's `read_kick` (EventConsumer::consume).
    kick.notify()?;
    kick.notify()?;
    assert!(vring.read_kick()?);
    assert_eq!(kick.count()?, 0);

    // The vring's call (EventNotifier::notify) is delivered once by an evfd Epoll.
    let ep = Epoll::new();
    ep.add(&call, Events::IN, 7)?;
    vring.signal_used_queue()?;
    vring.signal_used_queue()?;
    let mut evs = [Event::default(); 2];
    assert_eq!(ep.wait(&mut evs, Some(LONG))?, 1);
    assert_eq!(
        evs[0],
        Event {
            events: Events::IN,
            data: 7
        }
    );
    assert_eq!(ep.wait(&mut evs, Some(Duration::from_millis(20)))?, 0);

    // The vring's own halves, taken back into evfd: the same counters.
    let state = vring.get_ref();
    let their_kick = state.get_kick().as_ref().unwrap().try_clone()?;
    let their_call = state.get_call().as_ref().unwrap().try_clone()?;
    drop(state);
    let backend_kick = KernelNotifier::from_event_consumer(their_kick, Mode::AutoReset)?;
    let backend_call = KernelNotifier::try_from(their_call)?;
    kick.write(5)?;
    assert!(backend_kick.consume()?.contains(Events::IN));
    assert_eq!(kick.count()?, 0);
    backend_call.notify()?;
    assert_eq!(ep.wait(&mut evs, Some(LONG))?, 1);
    Ok(())
}

/// A vhost-user device whose queue 0 answers every kick with a call.
struct Device {
    /// `handle_event` calls for queue 0.
    events: Arc<AtomicUsize>,
    /// One exit notifier per worker thread (queue 0 → thread 0, queue 1 → thread 1).
    exits: Vec<KernelNotifier>,
}

impl VhostUserBackendMut for Device {
    type Bitmap = ();
    type Vring = VringRwLock;

    fn num_queues(&self) -> usize {
        2
    }
    fn max_queue_size(&self) -> usize {
        256
    }
    fn features(&self) -> u64 {
        // VHOST_USER_F_PROTOCOL_FEATURES (bit 30) and VIRTIO_F_VERSION_1 (bit 32).
        (1 << 30) | (1 << 32)
    }
    fn acked_features(&mut self, _features: u64) {}
    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        VhostUserProtocolFeatures::MQ | VhostUserProtocolFeatures::REPLY_ACK
    }
    fn set_event_idx(&mut self, _enabled: bool) {}
    fn update_memory(&mut self, _mem: GuestMemoryAtomic<GuestMemoryMmap>) -> io::Result<()> {
        Ok(())
    }
    fn set_backend_req_fd(&mut self, _backend: Backend) {}
    fn queues_per_thread(&self) -> Vec<u64> {
        vec![0b01, 0b10]
    }
    fn exit_event(&self, thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        // evfd's notifier, handed out as vmm-sys-util's pair.
        Some(
            self.exits[thread_index]
                .event_consumer_and_notifier()
                .unwrap(),
        )
    }
    fn handle_event(
        &mut self,
        device_event: u16,
        _evset: EventSet,
        vrings: &[VringRwLock],
        thread_id: usize,
    ) -> io::Result<()> {
        if thread_id == 0 && device_event == 0 {
            self.events.fetch_add(1, Ordering::SeqCst);
            vrings[0].signal_used_queue()?;
        }
        Ok(())
    }
}

#[test]
fn vhost_user_session() -> io::Result<()> {
    let events = Arc::new(AtomicUsize::new(0));
    let exits = [
        KernelNotifier::new(Mode::Counter)?,
        KernelNotifier::new(Mode::Counter)?,
    ];
    let device = Arc::new(Mutex::new(Device {
        events: Arc::clone(&events),
        exits: vec![exits[0].try_clone()?, exits[1].try_clone()?],
    }));
    let mut daemon = VhostUserDaemon::new(
        "evfd-interop".into(),
        device,
        GuestMemoryAtomic::new(GuestMemoryMmap::<()>::new()),
    )
    .unwrap();

    let path = std::env::temp_dir().join(format!("evfd-vhost-{}.sock", std::process::id()));
    let mut listener = Listener::new(&path, true).unwrap();
    let mut frontend = Frontend::connect(&path, 2).unwrap(); // waits in the backlog
    daemon.start(&mut listener).unwrap();
    let _ = std::fs::remove_file(&path);

    frontend.set_owner().unwrap();
    let features = frontend.get_features().unwrap();
    frontend.set_features(features).unwrap();
    let proto = frontend.get_protocol_features().unwrap();
    frontend.set_protocol_features(proto).unwrap();

    // Guest memory: one memfd-backed region holding the rings.
    let memfd = rustix::fs::memfd_create("evfd-vhost", rustix::fs::MemfdFlags::CLOEXEC)?;
    let file = File::from(memfd);
    file.set_len(0x10_0000)?;
    let mem = GuestMemoryMmap::<()>::from_ranges_with_files(&[(
        GuestAddress(0x10_0000),
        0x10_0000,
        Some(FileOffset::new(file.try_clone()?, 0)),
    )])
    .unwrap();
    let addr = mem.get_host_address(GuestAddress(0x10_0000)).unwrap() as u64;
    // vhost's `xen` feature adds fields; the update covers them.
    #[allow(clippy::needless_update)]
    let region = VhostUserMemoryRegionInfo {
        guest_phys_addr: 0x10_0000,
        memory_size: 0x10_0000,
        userspace_addr: addr,
        mmap_offset: 0,
        mmap_handle: file.as_raw_fd(),
        ..Default::default()
    };
    frontend.set_mem_table(&[region]).unwrap();
    frontend.set_vring_num(0, 256).unwrap();
    let config = VringConfigData {
        queue_max_size: 256,
        queue_size: 256,
        flags: 0,
        desc_table_addr: addr,
        used_ring_addr: addr + 0x1_0000,
        avail_ring_addr: addr + 0x2_0000,
        log_addr: None,
    };
    frontend.set_vring_addr(0, &config).unwrap();
    frontend.set_vring_base(0, 0).unwrap();

    // The front end's kick and call are evfd notifiers, handed to vhost as `&EventFd`.
    let kick = KernelNotifier::new(Mode::Counter)?;
    let call = KernelNotifier::new(Mode::AutoReset)?;
    frontend
        .set_vring_call(0, &EventFd::from(call.try_clone()?))
        .unwrap();
    frontend
        .set_vring_kick(0, &EventFd::from(kick.try_clone()?))
        .unwrap();
    let ep = Epoll::new();
    ep.add(&call, Events::IN, 0)?;
    ep.add(&exits[1], Events::IN, 1)?;
    let mut evs = [Event::default(); 4];

    frontend.set_vring_enable(0, true).unwrap();
    // Enabling a queue runs the backend's handler once (vhost-user-backend's pending-event
    // pass), which calls.
    assert_eq!(ep.wait(&mut evs, Some(LONG))?, 1);
    assert_eq!(
        evs[0],
        Event {
            events: Events::IN,
            data: 0
        }
    );
    assert_eq!(events.load(Ordering::SeqCst), 1);

    // Each kick: the worker consumes it (EventConsumer::consume on evfd's eventfd), the
    // backend calls (EventNotifier::notify), the evfd Epoll delivers once.
    const KICKS: usize = 50;
    for i in 0..KICKS {
        kick.notify()?;
        assert_eq!(ep.wait(&mut evs, Some(LONG))?, 1, "kick {i}");
        assert_eq!(evs[0].data, 0);
        assert_eq!(kick.count()?, 0, "the worker consumed kick {i}");
    }
    assert_eq!(ep.wait(&mut evs, Some(Duration::from_millis(50)))?, 0);
    assert_eq!(events.load(Ordering::SeqCst), 1 + KICKS);

    // rust-vmm → evfd: vhost-user-backend's `send_exit_event` writes thread 1's exit
    // notifier, which evfd's Epoll sees.
    daemon.get_epoll_handlers()[1].send_exit_event();
    assert_eq!(ep.wait(&mut evs, Some(LONG))?, 1);
    assert_eq!(
        evs[0],
        Event {
            events: Events::IN,
            data: 1
        }
    );
    ep.delete(&exits[1])?; // Counter: it stays readable (the worker does not read it)

    // evfd → rust-vmm: a write on evfd's side stops thread 0; its kicks stay unread.
    exits[0].notify()?;
    std::thread::sleep(Duration::from_millis(100));
    kick.notify()?;
    assert_eq!(
        ep.wait(&mut evs, Some(Duration::from_millis(200)))?,
        0,
        "no call"
    );
    assert_eq!(kick.count()?, 1, "nobody consumed the kick");
    assert_eq!(events.load(Ordering::SeqCst), 1 + KICKS);

    drop(frontend);
    let _ = daemon.wait();
    Ok(())
}
