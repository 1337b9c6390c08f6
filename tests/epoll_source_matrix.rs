//! One wait for everything: every face of an `Epoll` hears every kind of source.
//!
//! The matrix: each face — blocking `wait`, `wait_async` on `futures::executor::block_on`,
//! on a tokio current-thread and a multi-thread runtime, `EpollStream`, `Epoll::fd_view`
//! polled by a real kernel epoll (level- and edge-triggered), and an outer `Epoll` nesting
//! this one (blocking and async) — against each kernel source (a Counter and an AutoReset
//! `KernelNotifier`, a pipe and a Unix socket as `BorrowedFd`s), each next to an in-memory
//! notifier in Counter or AutoReset mode in the same epoll.
//!
//! Every case starts the face while nothing is ready, checks that it is really pending,
//! makes the kernel source ready from this thread and expects the face to deliver it
//! (an AutoReset `KernelNotifier` reset by that delivery), then the same for the in-memory
//! notifier. Every face runs on its own thread and is awaited with a deadline, so a lost
//! wake fails the case instead of hanging the suite.
//!
//! The other nesting direction (the outer epoll holds the kernel source, the inner one an
//! in-memory notifier) and a kernel epoll fd as a source are at the end.

mod util;

use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::Duration;

use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};
#[cfg(feature = "futures")]
use futures::StreamExt;

/// How long a delivery may take before the case counts as a lost wake (generous: the
/// machine is shared; a working face answers in microseconds).
const PROMPT: Duration = Duration::from_secs(5);
/// How long a face must stay pending before anything is made ready.
const SETTLE: Duration = Duration::from_millis(40);

#[derive(Clone, Copy, Debug)]
enum Kind {
    KnCounter,
    KnAutoReset,
    Pipe,
    Socket,
}

/// A kernel source and the means to make it ready and to consume it.
enum KSrc {
    Kn(KernelNotifier),
    Pipe(OwnedFd, OwnedFd),
    Socket(UnixStream, UnixStream),
}

impl KSrc {
    fn new(kind: Kind) -> KSrc {
        match kind {
            Kind::KnCounter => KSrc::Kn(KernelNotifier::new(Mode::Counter).unwrap()),
            Kind::KnAutoReset => KSrc::Kn(KernelNotifier::new(Mode::AutoReset).unwrap()),
            Kind::Pipe => {
                let (r, w) = rustix::pipe::pipe().unwrap();
                KSrc::Pipe(r, w)
            }
            Kind::Socket => {
                let (a, b) = UnixStream::pair().unwrap();
                a.set_nonblocking(true).unwrap();
                KSrc::Socket(a, b)
            }
        }
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            KSrc::Kn(k) => k.as_fd(),
            KSrc::Pipe(r, _) => r.as_fd(),
            KSrc::Socket(a, _) => a.as_fd(),
        }
    }

    fn add(&self, ep: &Epoll, events: Events, data: u64) -> std::io::Result<()> {
        match self {
            KSrc::Kn(k) => ep.add(k, events, data),
            _ => ep.add(&self.fd(), events, data),
        }
    }

    fn fire(&self) {
        match self {
            KSrc::Kn(k) => k.notify().unwrap(),
            KSrc::Pipe(_, w) => {
                rustix::io::write(w, b"x").unwrap();
            }
            KSrc::Socket(_, b) => {
                (&*b).write_all(b"x").unwrap();
            }
        }
    }

    /// After a delivery: an AutoReset `KernelNotifier` must have been reset by it (no read
    /// in user code); anything else is consumed here.
    fn after_delivery(&self) -> Result<(), String> {
        match self {
            KSrc::Kn(k) if k.mode() == Mode::AutoReset => match k.count().unwrap() {
                0 => Ok(()),
                c => Err(format!(
                    "AutoReset KernelNotifier not reset by delivery: count {c}"
                )),
            },
            KSrc::Kn(k) => {
                k.try_read().unwrap();
                Ok(())
            }
            KSrc::Pipe(r, _) => {
                let mut b = [0u8; 16];
                rustix::io::read(r, &mut b).unwrap();
                Ok(())
            }
            KSrc::Socket(a, _) => {
                let mut b = [0u8; 16];
                std::io::Read::read(&mut &*a, &mut b).unwrap();
                Ok(())
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Face {
    Blocking,
    BlockOn,
    TokioCurrent,
    TokioMulti,
    /// `Epoll::stream` (feature `futures`).
    #[cfg_attr(not(feature = "futures"), allow(dead_code))]
    Stream,
    ViewLt,
    ViewEt,
    NestedBlocking,
    NestedAsync,
}

/// What a face needs that outlives one wait: the view and its kernel watcher, or the
/// outer epoll.
enum Rig {
    None,
    /// The kernel epoll watching the view, and the view it watches (kept alive).
    View(util::Kep, #[allow(dead_code)] evfd::FdView),
    Outer(Epoll),
}

fn rig(face: Face, ep: &Epoll) -> Rig {
    match face {
        Face::ViewLt | Face::ViewEt => {
            let v = ep.fd_view().unwrap();
            Rig::View(util::Kep::new(&v, matches!(face, Face::ViewEt)), v)
        }
        Face::NestedBlocking | Face::NestedAsync => {
            let outer = Epoll::new();
            outer.add(ep, Events::IN, 99).unwrap();
            Rig::Outer(outer)
        }
        _ => Rig::None,
    }
}

fn tokio_rt(multi: bool) -> tokio::runtime::Runtime {
    if multi {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }
}

/// Start one wait on `face` in a thread: it sends the events `ep` finally delivered (for a
/// view or a nested face: after the poller/outer epoll reported, a zero-timeout `wait` on
/// `ep`), or an error text.
fn start(face: Face, ep: &Epoll, rig: &Rig) -> mpsc::Receiver<Result<Vec<Event>, String>> {
    let (tx, rx) = mpsc::channel();
    let ep = ep.clone();
    let long = Some(Duration::from_secs(30));
    let harvest = move |ep: &Epoll| -> Result<Vec<Event>, String> {
        let mut buf = [Event::default(); 8];
        let n = ep
            .wait(&mut buf, Some(Duration::ZERO))
            .map_err(|e| e.to_string())?;
        Ok(buf[..n].to_vec())
    };
    match (face, rig) {
        (Face::ViewLt | Face::ViewEt, Rig::View(kep, _)) => {
            // Wait on the kernel epoll from the thread through a dup of its fd. As any
            // consumer of an epoll's view: a wake whose harvest finds nothing (a
            // level-triggered item whose source was consumed since, re-polled only by a
            // harvest, see `FdView`) drains the view, and the consumer waits again.
            let kep = kep.try_clone();
            let et = matches!(face, Face::ViewEt);
            std::thread::spawn(move || {
                if et {
                    // The edge-triggered contract (`Epoll::fd_view`): harvest until `wait`
                    // returns 0 before waiting on the fd again.
                    for _ in 0..100 {
                        if harvest(&ep).map_or(true, |e| e.is_empty()) {
                            break;
                        }
                    }
                }
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                let r = loop {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if kep.wait(Some(left)) != 1 {
                        break Err("the kernel epoll watching the fd view timed out".into());
                    }
                    match harvest(&ep) {
                        Ok(evs) if evs.is_empty() => continue,
                        r => break r,
                    }
                };
                let _ = tx.send(r);
            });
        }
        (Face::NestedBlocking | Face::NestedAsync, Rig::Outer(outer)) => {
            let outer = outer.clone();
            std::thread::spawn(move || {
                let mut buf = [Event::default(); 4];
                let n = if matches!(face, Face::NestedBlocking) {
                    outer.wait(&mut buf, long)
                } else {
                    futures::executor::block_on(outer.wait_async(&mut buf))
                };
                let r = match n {
                    Ok(1) if buf[0].data == 99 => harvest(&ep),
                    Ok(0) => Err("the outer epoll timed out".into()),
                    other => Err(format!("outer epoll: {other:?} {:?}", &buf[..1])),
                };
                let _ = tx.send(r);
            });
        }
        _ => {
            std::thread::spawn(move || {
                let mut buf = [Event::default(); 8];
                let r = match face {
                    Face::Blocking => ep.wait(&mut buf, long).map(|n| buf[..n].to_vec()),
                    Face::BlockOn => futures::executor::block_on(ep.wait_async(&mut buf))
                        .map(|n| buf[..n].to_vec()),
                    Face::TokioCurrent | Face::TokioMulti => {
                        let rt = tokio_rt(matches!(face, Face::TokioMulti));
                        let ep2 = ep.clone();
                        rt.block_on(async move {
                            tokio::spawn(async move {
                                let mut buf = [Event::default(); 8];
                                match tokio::time::timeout(
                                    Duration::from_secs(30),
                                    ep2.wait_async(&mut buf),
                                )
                                .await
                                {
                                    Ok(r) => r.map(|n| buf[..n].to_vec()),
                                    Err(_) => Ok(Vec::new()),
                                }
                            })
                            .await
                            .unwrap()
                        })
                    }
                    #[cfg(feature = "futures")]
                    Face::Stream => {
                        let mut s = ep.stream();
                        futures::executor::block_on(s.next())
                            .unwrap()
                            .map(|e| vec![e])
                    }
                    _ => unreachable!(),
                };
                let _ = tx.send(r.map_err(|e| e.to_string()));
            });
        }
    }
    rx
}

/// One phase: the face is pending, `fire` makes one source ready, the face must deliver
/// `want` (and nothing else).
fn phase(face: Face, ep: &Epoll, rig: &Rig, fire: &dyn Fn(), want: u64) -> Result<(), String> {
    let rx = start(face, ep, rig);
    match rx.recv_timeout(SETTLE) {
        Err(mpsc::RecvTimeoutError::Timeout) => {}
        other => return Err(format!("not pending before anything was ready: {other:?}")),
    }
    fire();
    match rx.recv_timeout(PROMPT) {
        Ok(Ok(evs)) => {
            let datas: Vec<u64> = evs.iter().map(|e| e.data).collect();
            if datas != vec![want] || !evs[0].events.contains(Events::IN) {
                return Err(format!("delivered {evs:?}, wanted one IN event for {want}"));
            }
            Ok(())
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(format!(
            "source {want} became ready but the face never delivered it"
        )),
    }
}

fn case(face: Face, kind: Kind, mem_mode: Mode) -> Result<(), String> {
    let ep = Epoll::new();
    let mem = Notifier::builder().mode(mem_mode).build().unwrap();
    let k = KSrc::new(kind);
    ep.add(&mem, Events::IN, 1).unwrap();
    k.add(&ep, Events::IN, 2).unwrap();
    let rig = rig(face, &ep);
    phase(face, &ep, &rig, &|| k.fire(), 2).map_err(|e| format!("kernel source: {e}"))?;
    k.after_delivery()?;
    phase(face, &ep, &rig, &|| mem.notify().unwrap(), 1)
        .map_err(|e| format!("in-memory source: {e}"))?;
    if mem_mode == Mode::AutoReset {
        if mem.count() != 0 {
            return Err("AutoReset Notifier not reset by delivery".into());
        }
    } else {
        mem.read().unwrap();
    }
    Ok(())
}

fn matrix(face: Face, kind: Kind) {
    let fails: Vec<String> = [Mode::Counter, Mode::AutoReset]
        .into_iter()
        .filter_map(|m| {
            case(face, kind, m)
                .err()
                .map(|e| format!("{face:?} × {kind:?} × in-memory {m:?}: {e}"))
        })
        .collect();
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}

macro_rules! matrix_tests {
    ($($name:ident: $face:ident, $kind:ident;)*) => {
        $(
            #[test]
            fn $name() {
                matrix(Face::$face, Kind::$kind);
            }
        )*
    };
}

matrix_tests! {
    blocking_kn_counter: Blocking, KnCounter;
    blocking_kn_autoreset: Blocking, KnAutoReset;
    blocking_pipe: Blocking, Pipe;
    blocking_socket: Blocking, Socket;
    block_on_kn_counter: BlockOn, KnCounter;
    block_on_kn_autoreset: BlockOn, KnAutoReset;
    block_on_pipe: BlockOn, Pipe;
    block_on_socket: BlockOn, Socket;
    tokio_current_kn_counter: TokioCurrent, KnCounter;
    tokio_current_kn_autoreset: TokioCurrent, KnAutoReset;
    tokio_current_pipe: TokioCurrent, Pipe;
    tokio_current_socket: TokioCurrent, Socket;
    tokio_multi_kn_counter: TokioMulti, KnCounter;
    tokio_multi_kn_autoreset: TokioMulti, KnAutoReset;
    tokio_multi_pipe: TokioMulti, Pipe;
    tokio_multi_socket: TokioMulti, Socket;
    view_lt_kn_counter: ViewLt, KnCounter;
    view_lt_kn_autoreset: ViewLt, KnAutoReset;
    view_lt_pipe: ViewLt, Pipe;
    view_lt_socket: ViewLt, Socket;
    view_et_kn_counter: ViewEt, KnCounter;
    view_et_kn_autoreset: ViewEt, KnAutoReset;
    view_et_pipe: ViewEt, Pipe;
    view_et_socket: ViewEt, Socket;
    nested_blocking_kn_counter: NestedBlocking, KnCounter;
    nested_blocking_kn_autoreset: NestedBlocking, KnAutoReset;
    nested_blocking_pipe: NestedBlocking, Pipe;
    nested_blocking_socket: NestedBlocking, Socket;
    nested_async_kn_counter: NestedAsync, KnCounter;
    nested_async_kn_autoreset: NestedAsync, KnAutoReset;
    nested_async_pipe: NestedAsync, Pipe;
    nested_async_socket: NestedAsync, Socket;
}

// `Epoll::stream` needs feature `futures`.
#[cfg(feature = "futures")]
matrix_tests! {
    stream_kn_counter: Stream, KnCounter;
    stream_kn_autoreset: Stream, KnAutoReset;
    stream_pipe: Stream, Pipe;
    stream_socket: Stream, Socket;
}

/// The other nesting direction: the outer epoll holds the kernel source itself, and an
/// inner epoll with an in-memory notifier. Both must reach a waiter of the outer one.
fn outer_holds_kernel(kind: Kind, asynchronous: bool) {
    let inner = Epoll::new();
    let outer = Epoll::new();
    let mem = Notifier::builder().mode(Mode::AutoReset).build().unwrap();
    let k = KSrc::new(kind);
    inner.add(&mem, Events::IN, 1).unwrap();
    outer.add(&inner, Events::IN, 99).unwrap();
    k.add(&outer, Events::IN, 2).unwrap();
    let face = if asynchronous {
        Face::BlockOn
    } else {
        Face::Blocking
    };
    phase(face, &outer, &Rig::None, &|| k.fire(), 2).unwrap();
    k.after_delivery().unwrap();
    phase(face, &outer, &Rig::None, &|| mem.notify().unwrap(), 99).unwrap();
    let mut buf = [Event::default(); 4];
    assert_eq!(inner.wait(&mut buf, Some(Duration::ZERO)).unwrap(), 1);
    assert_eq!(buf[0].data, 1);
    assert_eq!(mem.count(), 0);
}

#[test]
fn outer_holds_kernel_blocking_kn_autoreset() {
    outer_holds_kernel(Kind::KnAutoReset, false);
}

#[test]
fn outer_holds_kernel_blocking_socket() {
    outer_holds_kernel(Kind::Socket, false);
}

#[test]
fn outer_holds_kernel_async_kn_counter() {
    outer_holds_kernel(Kind::KnCounter, true);
}

#[test]
fn outer_holds_kernel_async_pipe() {
    outer_holds_kernel(Kind::Pipe, true);
}

/// Three levels: the kernel source two epolls down reaches an async waiter at the top.
#[test]
fn nested_two_levels_async() {
    let (a, b, c) = (Epoll::new(), Epoll::new(), Epoll::new());
    let k = KernelNotifier::new(Mode::AutoReset).unwrap();
    c.add(&k, Events::IN, 2).unwrap();
    b.add(&c, Events::IN, 20).unwrap();
    a.add(&b, Events::IN, 200).unwrap();
    phase(Face::BlockOn, &a, &Rig::None, &|| k.notify().unwrap(), 200).unwrap();
    assert_eq!(
        k.count().unwrap(),
        1,
        "a readiness check of a nested epoll resets nothing"
    );
    let mut buf = [Event::default(); 4];
    assert_eq!(c.wait(&mut buf, Some(Duration::ZERO)).unwrap(), 1);
    assert_eq!(k.count().unwrap(), 0);
}

/// A real kernel epoll fd as a source (the kernel nests inside evfd), with an async waiter.
#[test]
fn kernel_epoll_fd_as_a_source_async() {
    let (r, w) = rustix::pipe::pipe().unwrap();
    let kep = util::Kep::new(&r, false);
    let ep = Epoll::new();
    ep.add(&kep.as_fd(), Events::IN, 5).unwrap();
    phase(
        Face::BlockOn,
        &ep,
        &Rig::None,
        &|| {
            rustix::io::write(&w, b"x").unwrap();
        },
        5,
    )
    .unwrap();
}

/// A stream keeps delivering kernel events one after the other, each AutoReset delivery
/// resetting the kick (no read in user code).
#[test]
#[cfg(feature = "futures")]
fn stream_of_kicks_resets_each() {
    let ep = Epoll::new();
    let kick = std::sync::Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
    ep.add(&*kick, Events::IN, 3).unwrap();
    let (tx, rx) = mpsc::channel();
    let ep2 = ep.clone();
    let kick2 = kick.clone();
    std::thread::spawn(move || {
        futures::executor::block_on(async {
            let mut s = ep2.stream();
            for _ in 0..20 {
                let e = s.next().await.unwrap().unwrap();
                let c = kick2.count().unwrap();
                if tx.send((e.data, c)).is_err() {
                    return;
                }
            }
        })
    });
    for i in 0..20 {
        std::thread::sleep(Duration::from_millis(2));
        kick.notify().unwrap();
        let (d, c) = rx
            .recv_timeout(PROMPT)
            .unwrap_or_else(|_| panic!("kick {i} never delivered by the stream"));
        assert_eq!((d, c), (3, 0), "kick {i}");
    }
}
