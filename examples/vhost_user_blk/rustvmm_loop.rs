//! `--loop rust-vmm`: the same device on `vhost-user-backend`'s `VhostUserDaemon`, written
//! the way rust-vmm device authors write it today: a `VhostUserBackend` whose
//! `handle_event` serves a queue after the daemon's vring thread woke in its
//! `vmm-sys-util` epoll and read the kick `EventFd`, and `VringRwLock::signal_used_queue`
//! for the call. The twin that isolates what `--loop evfd` changes.

use std::io;
use std::sync::{Arc, Mutex};

use vhost::vhost_user::message::VhostUserProtocolFeatures;
use vhost::vhost_user::Listener;
use vhost_user_backend::{VhostUserBackend, VhostUserDaemon, VringRwLock, VringT};
use virtio_queue::QueueT;
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};

use crate::device::{BlockDevice, Mem, MAX_QUEUE_SIZE};

/// The `VhostUserBackend` face of [`BlockDevice`].
#[derive(Clone)]
struct RvBackend {
    dev: Arc<BlockDevice>,
    mem: Arc<Mutex<Option<GuestMemoryAtomic<Mem>>>>,
}

impl VhostUserBackend for RvBackend {
    type Bitmap = ();
    type Vring = VringRwLock<GuestMemoryAtomic<Mem>>;

    fn num_queues(&self) -> usize {
        usize::from(self.dev.num_queues())
    }

    fn max_queue_size(&self) -> usize {
        usize::from(MAX_QUEUE_SIZE)
    }

    fn features(&self) -> u64 {
        self.dev.features()
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        VhostUserProtocolFeatures::CONFIG
            | VhostUserProtocolFeatures::MQ
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
    }

    fn set_event_idx(&self, _enabled: bool) {
        // The daemon sets it on each vring's queue itself.
    }

    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        self.dev.read_config(offset, size).unwrap_or_default()
    }

    fn update_memory(&self, mem: GuestMemoryAtomic<Mem>) -> io::Result<()> {
        *self.mem.lock().unwrap_or_else(|p| p.into_inner()) = Some(mem);
        Ok(())
    }

    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        new_event_consumer_and_notifier(EventFlag::NONBLOCK).ok()
    }

    fn handle_event(
        &self,
        device_event: u16,
        evset: EventSet,
        vrings: &[VringRwLock<GuestMemoryAtomic<Mem>>],
        _thread_id: usize,
    ) -> io::Result<()> {
        if evset != EventSet::IN {
            return Ok(());
        }
        let Some(vring) = vrings.get(usize::from(device_event)) else {
            return Ok(()); // the exit event or an index this device never registered
        };
        let Some(atomic) = self.mem.lock().unwrap_or_else(|p| p.into_inner()).clone() else {
            return Ok(());
        };
        let mem = atomic.memory();
        let mut state = vring.get_mut();
        // An error from this function stops the daemon's vring thread for good; a broken
        // ring is the guest's doing, so it is logged and the queue left unserved instead.
        match self
            .dev
            .process_queue(usize::from(device_event), state.get_queue_mut(), &mem)
        {
            Ok(true) => {
                if let Err(e) = state.signal_used_queue() {
                    eprintln!("vhost_user_blk: queue {device_event}: call: {e}");
                }
            }
            Ok(false) => {}
            Err(e) => {
                eprintln!("vhost_user_blk: queue {device_event} broken by the guest: {e}");
                state.get_queue_mut().set_ready(false);
            }
        }
        Ok(())
    }
}

/// Serve frontends on `listener`, one at a time, forever: a fresh daemon per frontend.
pub fn run(listener: &mut Listener, dev: Arc<BlockDevice>) -> ! {
    loop {
        let backend = RvBackend {
            dev: Arc::clone(&dev),
            mem: Arc::new(Mutex::new(None)),
        };
        let mut daemon = match VhostUserDaemon::new(
            "vhost_user_blk".to_string(),
            backend,
            GuestMemoryAtomic::new(GuestMemoryMmap::new()),
        ) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("vhost_user_blk: daemon: {e}");
                std::thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
        };
        if let Err(e) = daemon.start(listener) {
            eprintln!("vhost_user_blk: accept: {e}");
            continue;
        }
        eprintln!("vhost_user_blk: frontend connected (rust-vmm loop)");
        match daemon.wait() {
            Ok(()) => eprintln!("vhost_user_blk: frontend gone; waiting for the next"),
            Err(e) => eprintln!("vhost_user_blk: session ended: {e}; waiting for the next"),
        }
        for h in daemon.get_epoll_handlers() {
            h.send_exit_event();
        }
        eprintln!("vhost_user_blk: served per queue: {:?}", dev.take_served());
    }
}
