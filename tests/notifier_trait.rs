//! The `EventNotifier` trait: one script run through the trait on every notifier kind (in
//! memory, kernel eventfd, shared across processes) must give the same results, errors and
//! errnos included; generic code watches, waits on and awaits any kind; kernel fd adoption
//! (`TryFrom<OwnedFd>`) and hand-off (`into_blocking_fd`).

use std::io::ErrorKind;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::mpsc;
use std::time::Duration;

use evfd::{
    Epoll, Event, EventNotifier, Events, KernelNotifier, Mode, Notifier, SharedNotifier, LIMIT,
};
use rustix::event::{eventfd, EventfdFlags};

/// What a step returned, comparable across kinds: a value or an error kind with its errno
/// (every kind's errors carry one).
#[derive(Debug, PartialEq)]
enum Out {
    Val(u64),
    Ev(Events),
    Err(ErrorKind, Option<i32>),
}

fn out<T: Into<u64>>(r: std::io::Result<T>) -> Out {
    match r {
        Ok(v) => Out::Val(v.into()),
        Err(e) => Out::Err(e.kind(), e.raw_os_error()),
    }
}

/// A script over the trait only; returns every step's result.
fn script(n: &dyn EventNotifier) -> Vec<Out> {
    let unit = |r: std::io::Result<()>| out(r.map(|()| 0u64));
    let io = Events::IN | Events::OUT;
    vec![
        Out::Ev(n.poll(io)),
        out(n.try_read()),
        out(n.read_timeout(Duration::from_millis(2))),
        unit(n.write(0)),
        out(n.count()),
        unit(n.notify()),
        unit(n.write(4)),
        out(n.count()),
        Out::Ev(n.poll(io)),
        Out::Ev(n.consume().unwrap()),
        out(n.count()),
        out(n.try_read()),
        out(n.count()),
        unit(n.try_write(u64::MAX)),
        unit(n.write(u64::MAX)),
        unit(n.try_write(LIMIT)),
        unit(n.try_write(1)),
        Out::Ev(n.poll(io)),
        out(n.count()),
        out(n.read()),
        out(n.read_timeout(Duration::from_millis(2))),
        Out::Ev(n.poll(io)),
        unit(n.write_timeout(LIMIT, Duration::from_millis(2))),
        unit(n.write_timeout(1, Duration::from_millis(2))),
        unit(n.write_timeout(u64::MAX, Duration::from_millis(2))),
        out(n.count()),
        out(n.read()),
        Out::Val(n.is_cloexec() as u64),
    ]
}

#[test]
fn same_script_same_results_on_every_kind() {
    for mode in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
        let mem = Notifier::builder().mode(mode).build().unwrap();
        let kern = KernelNotifier::new(mode).unwrap();
        let shared = SharedNotifier::new(mode).unwrap();
        let kinds: [&dyn EventNotifier; 3] = [&mem, &kern, &shared];
        assert!(kinds
            .iter()
            .all(|k| k.mode() == mode && !k.is_nonblocking()));
        let a = script(&mem);
        let b = script(&kern);
        let c = script(&shared);
        assert_eq!(
            a, b,
            "{mode:?}: Notifier vs KernelNotifier through the trait"
        );
        assert_eq!(
            a, c,
            "{mode:?}: Notifier vs SharedNotifier through the trait"
        );
        // And the script means something: spot-check the in-memory run.
        let eagain = Out::Err(ErrorKind::WouldBlock, Some(libc::EAGAIN));
        let etimedout = Out::Err(ErrorKind::TimedOut, Some(libc::ETIMEDOUT));
        let einval = Out::Err(ErrorKind::InvalidInput, Some(libc::EINVAL));
        assert_eq!(a[1], eagain, "{mode:?}");
        assert_eq!(a[2], etimedout, "{mode:?}");
        assert_eq!(a[7], Out::Val(5), "{mode:?}");
        assert_eq!(a[13], einval, "{mode:?}");
        assert!(
            a[22..24].contains(&etimedout),
            "{mode:?}: write_timeout at the limit: {a:?}"
        );
        assert_eq!(a[24], einval, "{mode:?}");
        assert_eq!(a[27], Out::Val(1), "{mode:?}: close-on-exec by default");
        let after_consume = if mode == Mode::AutoReset { 0 } else { 5 };
        assert_eq!(a[10], Out::Val(after_consume), "{mode:?}");
    }
}

#[test]
fn nonblocking_kinds_agree() {
    let mem = Notifier::builder().nonblocking(true).build().unwrap();
    let kern = KernelNotifier::builder().nonblocking(true).build().unwrap();
    for n in [&mem as &dyn EventNotifier, &kern] {
        assert!(n.is_nonblocking());
        assert_eq!(n.read().unwrap_err().kind(), ErrorKind::WouldBlock);
        n.write(LIMIT).unwrap();
        assert_eq!(n.write(1).unwrap_err().kind(), ErrorKind::WouldBlock);
        assert_eq!(n.count().unwrap(), LIMIT, "a failed write changed nothing");
    }
}

#[test]
fn fd_where_there_is_one() {
    let k = KernelNotifier::new(Mode::Counter).unwrap();
    let fd = EventNotifier::fd(&k).unwrap();
    assert_eq!(fd.as_raw_fd(), k.as_raw_fd());
    // A write through the raw fd shows through the trait.
    rustix::io::write(fd, &7u64.to_ne_bytes()).unwrap();
    assert_eq!(EventNotifier::try_read(&k).unwrap(), 7);
    assert!(EventNotifier::fd(&Notifier::new()).is_none());
}

#[test]
fn generic_code_over_threads() {
    fn pump<N: EventNotifier + 'static>(n: std::sync::Arc<N>) -> u64 {
        let w = {
            let n = n.clone();
            std::thread::spawn(move || (0..1000).for_each(|_| n.notify().unwrap()))
        };
        let mut got = 0;
        while got < 1000 {
            got += n.read_timeout(Duration::from_secs(10)).expect("watchdog");
        }
        w.join().unwrap();
        got
    }
    assert_eq!(pump(std::sync::Arc::new(Notifier::new())), 1000);
    assert_eq!(
        pump(std::sync::Arc::new(
            KernelNotifier::new(Mode::Counter).unwrap()
        )),
        1000
    );
}

fn fdinfo_shows_semaphore() -> bool {
    let probe = eventfd(0, EventfdFlags::SEMAPHORE).unwrap();
    std::fs::read_to_string(format!("/proc/self/fdinfo/{}", probe.as_raw_fd()))
        .map(|t| t.contains("eventfd-semaphore"))
        .unwrap_or(false)
}

#[test]
fn try_from_owned_fd_takes_the_fds_mode() {
    let k = KernelNotifier::try_from(eventfd(3, EventfdFlags::CLOEXEC).unwrap()).unwrap();
    assert_eq!(k.mode(), Mode::Counter);
    assert!(rustix::fs::fcntl_getfl(&k)
        .unwrap()
        .contains(rustix::fs::OFlags::NONBLOCK));
    assert_eq!(k.read().unwrap(), 3);
    assert_eq!(k.try_read().unwrap_err().kind(), ErrorKind::WouldBlock);

    let k = KernelNotifier::try_from(eventfd(2, EventfdFlags::SEMAPHORE).unwrap()).unwrap();
    if fdinfo_shows_semaphore() {
        assert_eq!(k.mode(), Mode::Semaphore);
    }
    assert_eq!(k.read().unwrap(), 1);
    assert_eq!(k.read().unwrap(), 1);
}

#[test]
fn try_from_refuses_what_is_not_an_eventfd_with_einval() {
    let (rd, wr) = rustix::pipe::pipe().unwrap();
    let epfd: OwnedFd =
        rustix::event::epoll::create(rustix::event::epoll::CreateFlags::CLOEXEC).unwrap();
    let file: OwnedFd = std::fs::File::open("/proc/self/status").unwrap().into();
    for fd in [rd, wr, epfd, file] {
        let e = KernelNotifier::try_from(fd).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }
}

#[test]
fn into_blocking_fd_serves_a_blocking_peer() {
    let k = KernelNotifier::new(Mode::Counter).unwrap();
    let writer = k.try_clone().unwrap();
    let fd = k.into_blocking_fd().unwrap();
    assert!(!rustix::fs::fcntl_getfl(&fd)
        .unwrap()
        .contains(rustix::fs::OFlags::NONBLOCK));
    let (tx, rx) = mpsc::channel();
    let peer = std::thread::spawn(move || {
        let mut buf = [0u8; 8];
        // A blocking read(2) as C code would do it: it must sleep until the write.
        rustix::io::read(fd.as_fd(), &mut buf).unwrap();
        tx.send(u64::from_ne_bytes(buf)).unwrap();
    });
    // The peer is asleep in read(2) rather than failing with EAGAIN.
    assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
    writer.write(9).unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)).expect("watchdog"),
        9
    );
    peer.join().unwrap();
}

#[test]
fn notifier_consume_resets_autoreset_and_its_views() {
    let kick = Notifier::builder().mode(Mode::AutoReset).build().unwrap();
    let view = kick.fd_view().unwrap();
    let readable = || {
        let mut fds = [rustix::event::PollFd::new(
            &view,
            rustix::event::PollFlags::IN,
        )];
        rustix::event::poll(&mut fds, Some(&rustix::event::Timespec::default())).unwrap() == 1
    };
    kick.write(3).unwrap();
    assert!(readable());
    assert_eq!(kick.consume(), Events::IN | Events::OUT);
    assert_eq!(kick.count(), 0);
    assert!(!readable(), "the delivery drained the view's doorbell");
    assert_eq!(kick.consume(), Events::OUT, "nothing new to deliver");
    // Counter: a readiness check that changes nothing.
    let n = Notifier::builder().initial(2).build().unwrap();
    assert_eq!(n.consume(), Events::IN | Events::OUT);
    assert_eq!(n.count(), 2);
}

/// Generic code adds any kind to an epoll, waits, and awaits it: the trait is a `Source`.
#[test]
fn generic_code_watches_and_awaits_every_kind() {
    fn run<T: EventNotifier>(t: &T) -> u64 {
        let ep = Epoll::new();
        ep.add(t, Events::IN, 5).unwrap();
        let mut evs = [Event::default(); 2];
        assert_eq!(ep.wait(&mut evs, Some(Duration::ZERO)).unwrap(), 0);
        t.write(2).unwrap();
        assert_eq!(ep.wait(&mut evs, Some(Duration::from_secs(5))).unwrap(), 1);
        assert_eq!(evs[0].data, 5);
        // The async waits, on an executor that is not tokio.
        futures::executor::block_on(t.write_async(3)).unwrap();
        let got = futures::executor::block_on(t.read_async()).unwrap();
        ep.delete(t).unwrap();
        got
    }
    assert_eq!(run(&Notifier::new()), 5);
    assert_eq!(run(&KernelNotifier::new(Mode::Counter).unwrap()), 5);
    assert_eq!(run(&SharedNotifier::new(Mode::Counter).unwrap()), 5);
}
