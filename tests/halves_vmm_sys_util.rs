//! The kick/call halves to and from vmm-sys-util 0.15's `EventConsumer` / `EventNotifier`
//! (feature `vmm-sys-util`): the same fd both ways (eventfd and pipe), the semaphore flag
//! read from the fd, and the halves handed to vhost-user-backend 0.24's `VringRwLock` as its
//! kick and call and taken back from it.
#![cfg(target_os = "linux")]

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::time::Duration;

use evfd::halves::{self, ConsumerHalf, NotifierHalf};
use evfd::{Epoll, Event, Events, KernelNotifier, Mode};
use rustix::fs::OFlags;
use vhost_user_backend::{VringRwLock, VringT};
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};
use vmm_sys_util::eventfd::{EventFd, EFD_SEMAPHORE};

const LONG: Option<Duration> = Some(Duration::from_secs(5));
const SHORT: Option<Duration> = Some(Duration::from_millis(20));

fn nonblocking(fd: impl AsFd) -> bool {
    rustix::fs::fcntl_getfl(fd)
        .unwrap()
        .contains(OFlags::NONBLOCK)
}

/// rust-vmm's eventfd pair into halves and back: one counter, one open file description.
#[test]
fn eventfd_pair_both_ways() -> io::Result<()> {
    let (consumer, notifier) = new_event_consumer_and_notifier(EventFlag::CLOEXEC)?;
    let raw = (consumer.as_raw_fd(), notifier.as_raw_fd());
    let kick = ConsumerHalf::from_event_consumer(consumer, Mode::Counter)?;
    let call = NotifierHalf::try_from(notifier)?;
    // The same fds, not copies; adoption made the shared description O_NONBLOCK.
    assert_eq!((kick.as_raw_fd(), call.as_raw_fd()), raw);
    assert!(!kick.is_pipe() && !call.is_pipe());
    assert!(nonblocking(&kick));
    call.write(3)?;
    call.notify()?;
    assert_eq!(kick.read()?, 4);
    // Back to rust-vmm: still one counter.
    let their_consumer = EventConsumer::from(kick);
    let their_notifier = EventNotifier::from(call);
    assert_eq!(their_consumer.as_raw_fd(), raw.0);
    their_notifier.notify()?;
    their_consumer.consume()?;
    assert_eq!(
        their_consumer.consume().unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    Ok(())
}

/// A pipe pair, as vmm-sys-util makes it off Linux: `KernelNotifier` refuses it, the halves
/// take it, and vmm-sys-util's own `notify`/`consume` (8-byte words) talk to evfd's.
#[test]
fn pipe_pair_both_ways() -> io::Result<()> {
    let (rd, wr) = rustix::pipe::pipe()?;
    // SAFETY: each fd is open and owned by the `OwnedFd` given up here.
    let consumer = unsafe { EventConsumer::from_raw_fd(rd.into_raw_fd()) };
    // SAFETY: as above.
    let notifier = unsafe { EventNotifier::from_raw_fd(wr.into_raw_fd()) };
    let kick = ConsumerHalf::try_from(consumer)?;
    assert!(kick.is_pipe());
    assert_eq!(kick.mode(), Mode::Counter);
    let call = NotifierHalf::from_event_notifier(notifier)?;
    assert!(call.is_pipe());
    call.notify()?;
    call.notify()?;
    assert_eq!(kick.read()?, 2);
    // evfd's pipe halves to rust-vmm: vmm-sys-util writes and reads the same words.
    let (c, n) = halves::pipe(Mode::AutoReset)?;
    let theirs = EventNotifier::from(n);
    theirs.notify()?;
    theirs.notify()?;
    assert!(c.consume()?.contains(Events::IN));
    assert!(
        !c.consume()?.contains(Events::IN),
        "one delivery took both words"
    );
    let (c, n) = halves::pipe(Mode::Counter)?;
    let their_consumer = EventConsumer::from(c);
    n.notify()?;
    their_consumer.consume()?; // one 8-byte word
                               // The wrong ends are refused.
    let (rd, wr) = rustix::pipe::pipe()?;
    // SAFETY: as above.
    let wrong_c = unsafe { EventConsumer::from_raw_fd(wr.into_raw_fd()) };
    // SAFETY: as above.
    let wrong_n = unsafe { EventNotifier::from_raw_fd(rd.into_raw_fd()) };
    for e in [
        ConsumerHalf::from_event_consumer(wrong_c, Mode::Counter).unwrap_err(),
        NotifierHalf::from_event_notifier(wrong_n).unwrap_err(),
    ] {
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
    Ok(())
}

/// `TryFrom<EventConsumer>` reads `EFD_SEMAPHORE` from the fd (where the kernel shows it).
#[test]
fn semaphore_flag_travels() -> io::Result<()> {
    let efd = EventFd::new(EFD_SEMAPHORE)?;
    let shows = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", efd.as_raw_fd()))?
        .contains("eventfd-semaphore");
    efd.write(2)?;
    // SAFETY: `into_raw_fd` gives up an fd the EventFd owned alone.
    let consumer = unsafe { EventConsumer::from_raw_fd(efd.into_raw_fd()) };
    let kick = ConsumerHalf::try_from(consumer)?;
    if shows {
        assert_eq!(kick.mode(), Mode::Semaphore);
    } else {
        println!("skipped the mode check: this kernel does not show eventfd-semaphore");
    }
    assert_eq!(kick.read()?, 1); // the fd's own flag
    assert_eq!(kick.read()?, 1);
    Ok(())
}

/// vhost-user-backend's vring given the halves as kick and call (`set_kick`/`set_call`
/// take the `File` its request handler would), and its halves taken back into evfd.
#[test]
fn vring_kick_and_call() -> io::Result<()> {
    let mem = GuestMemoryAtomic::new(GuestMemoryMmap::<()>::new());
    let vring = VringRwLock::new(mem, 256).unwrap();
    vring.set_enabled(true);

    let kick_k = KernelNotifier::new(Mode::AutoReset)?;
    let (_kick_c, kick) = kick_k.halves()?;
    let call_k = KernelNotifier::new(Mode::AutoReset)?;
    let (call, call_n) = call_k.halves()?;
    vring.set_kick(Some(File::from(OwnedFd::from(kick_k.try_clone()?))));
    vring.set_call(Some(File::from(OwnedFd::from(call_n))));

    // A kick written through the notifier half is consumed by the vring's `read_kick`.
    kick.notify()?;
    kick.notify()?;
    assert!(vring.read_kick()?);
    assert_eq!(kick_k.count()?, 0);

    // The vring's call is delivered once by an evfd Epoll watching the consumer half.
    let ep = Epoll::new();
    ep.add(&call, Events::IN, 7)?;
    vring.signal_used_queue()?;
    vring.signal_used_queue()?;
    let mut evs = [Event::default(); 2];
    assert_eq!(ep.wait(&mut evs, LONG)?, 1);
    assert_eq!((evs[0].events, evs[0].data), (Events::IN, 7));
    assert_eq!(ep.wait(&mut evs, SHORT)?, 0);

    // The vring's own kick and call, taken back as halves: the same counters.
    let state = vring.get_ref();
    let their_kick = state.get_kick().as_ref().unwrap().try_clone()?;
    let their_call = state.get_call().as_ref().unwrap().try_clone()?;
    drop(state);
    let backend_kick = ConsumerHalf::from_event_consumer(their_kick, Mode::AutoReset)?;
    let backend_call = NotifierHalf::try_from(their_call)?;
    kick.write(5)?;
    assert!(backend_kick.consume()?.contains(Events::IN));
    assert_eq!(kick_k.count()?, 0);
    backend_call.notify()?;
    assert_eq!(ep.wait(&mut evs, LONG)?, 1);
    Ok(())
}
