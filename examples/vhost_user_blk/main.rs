//! A vhost-user-blk backend on evfd, serving a raw image to QEMU (or any vhost-user
//! frontend):
//!
//! ```text
//! vhost_user_blk --socket PATH --image FILE [--queues N] [--read-only] [--loop evfd|rust-vmm]
//! ```
//!
//! It listens on PATH, serves one frontend at a time, and after a disconnect (clean, or the
//! frontend killed in the middle of I/O) resets and serves the next. Nothing a frontend or
//! a guest does makes it exit. With `--read-only` the disk is offered read-only
//! (`VIRTIO_BLK_F_RO`; the image is opened read-only, every write fails with `IOERR`).
//! A backend started on the socket of one that died takes its rings over (QEMU reconnects
//! with `-chardev socket,...,reconnect=1`). For the QEMU checks only,
//! `VUBLK_DIE_BEFORE_CALL=N` in the environment makes the evfd loop exit in place of its
//! `N`th call, as a crash at the worst moment would.
//!
//! - `device.rs`: the virtio-blk device (features, config space, requests), written once.
//! - `evfd_loop.rs`: `--loop evfd` (default), one `evfd::Epoll` as the only wait.
//! - `rustvmm_loop.rs`: `--loop rust-vmm`, the same device on `vhost-user-backend`.
//!
//! Run it against QEMU with `scripts/qemu-vhost-user.sh` (the README's "For device
//! authors" section has the QEMU command line).

mod device;
mod evfd_loop;
mod rustvmm_loop;

use std::fs::OpenOptions;
use std::process::ExitCode;
use std::sync::Arc;

use vhost::vhost_user::Listener;

const USAGE: &str =
    "usage: vhost_user_blk --socket PATH --image FILE [--queues N] [--read-only] [--loop evfd|rust-vmm]";

#[derive(Debug, PartialEq)]
enum LoopKind {
    Evfd,
    RustVmm,
}

struct Args {
    socket: String,
    image: String,
    queues: u16,
    read_only: bool,
    kind: LoopKind,
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut socket, mut image, mut queues, mut kind) = (None, None, 1u16, LoopKind::Evfd);
    let mut read_only = false;
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--socket" => socket = Some(val()?),
            "--image" => image = Some(val()?),
            "--queues" => {
                let v = val()?;
                queues = v
                    .parse()
                    .map_err(|_| format!("--queues {v}: not a number"))?;
            }
            "--loop" => {
                kind = match val()?.as_str() {
                    "evfd" => LoopKind::Evfd,
                    "rust-vmm" => LoopKind::RustVmm,
                    other => return Err(format!("--loop {other}: expected evfd or rust-vmm")),
                }
            }
            "--read-only" => read_only = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Args {
        socket: socket.ok_or("--socket is required")?,
        image: image.ok_or("--image is required")?,
        queues,
        read_only,
        kind,
    })
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("vhost_user_blk: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let opened = OpenOptions::new()
        .read(true)
        .write(!args.read_only)
        .open(&args.image);
    let image = match opened {
        Ok(f) => f,
        Err(e) => {
            eprintln!("vhost_user_blk: {}: {e}", args.image);
            return ExitCode::FAILURE;
        }
    };
    let dev = match device::BlockDevice::new(image, args.queues, args.read_only) {
        Ok(d) => Arc::new(d),
        Err(e) => {
            eprintln!("vhost_user_blk: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut listener = match Listener::new(&args.socket, true) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("vhost_user_blk: {}: {e}", args.socket);
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "vhost_user_blk: serving {}{} ({} sectors, {} queues) on {} with the {:?} loop",
        args.image,
        if args.read_only { " read-only" } else { "" },
        dev.sectors(),
        dev.num_queues(),
        args.socket,
        args.kind
    );
    match args.kind {
        LoopKind::Evfd => evfd_loop::run(&mut listener, dev),
        LoopKind::RustVmm => rustvmm_loop::run(&mut listener, dev),
    }
}
