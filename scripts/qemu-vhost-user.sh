#!/usr/bin/env bash
# The vhost-user-blk backend (examples/vhost_user_blk) against a real Linux guest under QEMU
# (TCG, 2 vCPUs, 2 queues).
#
#   scripts/qemu-vhost-user.sh            the checks, on --loop evfd and --loop rust-vmm
#   scripts/qemu-vhost-user.sh --bench [--secs N] [--rounds N] [--readme]
#                                         the figures: evfd, rust-vmm, qemu-storage-daemon,
#                                         each serving its own disk to one guest, which
#                                         takes an N s phase on each disk in turn, for N
#                                         rounds (default 9 of 3 s; medians), then one
#                                         boot with every backend under strace; --readme
#                                         writes the table into README.md and docs/data/
#                                         (VUBLK_BENCH="evfd rust-vmm": fewer backends)
#
# Installs what is missing (apt-get: qemu-system-x86, busybox-static, cpio, gcc, strace),
# fetches a guest kernel (the package linux-image-cloud-amd64 depends on), builds a busybox
# initramfs whose /init (scripts/vhost-user/init) runs scripts/vhost-user/guest-io.c, builds
# the backend (cargo build --release --example vhost_user_blk) and runs the checks:
#
#   pattern            a pattern written with O_DIRECT and read back
#   scatter            scattered rewrites, then the whole region verified
#   topology           the guest sees 512-byte logical blocks and the image file system's
#                      block as its physical block and minimum I/O size
#   zeroes             DISCARD and WRITE_ZEROES (with and without unmap) from the guest's
#                      BLKDISCARD, BLKZEROOUT and fallocate, the rest of the region intact
#   both-queues        both virtqueues served requests (the backend's per-queue counts)
#   mem-slots          (evfd loop) QEMU sent its memory region by region (ADD_MEM_REG)
#   second-sees-first  a second QEMU on the same backend reads the first one's data
#   killed-frontend    a QEMU SIGKILLed in the middle of I/O; the backend stays up
#   fresh-after-kill   a full fresh run (pattern, scatter, both queues) after the kill
#   backend-alive      the backend never exited
#   read-only          the backend restarted with --read-only: the guest sees a read-only
#                      disk that reads, and a write sent to it fails and changes nothing
#   died-before-call   (evfd loop) under a guest writing and verifying on both vCPUs, the
#                      backend exits in place of a call, its request in the used ring
#                      (VUBLK_DIE_BEFORE_CALL); the next one, which QEMU (reconnect=1)
#                      reconnects to, makes that call, and the guest's passes go on
#   restarted-backend  then the backend SIGKILLed wherever it is and a new one started:
#                      the guest's passes finish, every block as written
#
# One line per check, then `N passed, N failed`; exit status 1 if a check failed. Skips
# (exit 0, with a loud SKIPPED line) only when the packages cannot be installed.
# Downloads and builds are cached under target/vhost-user (VUBLK_WORK to move it).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=${VUBLK_WORK:-$ROOT/target/vhost-user}
mkdir -p "$WORK"
BENCH=0
SECS=3
ROUNDS=9
README=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) BENCH=1 ;;
    --secs) SECS=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --readme) README=1 ;;
    *) echo "usage: $0 [--bench [--secs N] [--rounds N] [--readme]]" >&2; exit 2 ;;
  esac
  shift
done
log() { printf '[vhost-user] %s\n' "$*" >&2; }
skip() {
  echo "=================================================================="
  echo "SKIPPED: vhost-user QEMU checks: $*"
  echo "=================================================================="
  exit 0
}

# ---- packages --------------------------------------------------------------------------
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v qemu-storage-daemon >/dev/null || need+=(qemu-system-x86)
is_static() { [ -x "$1" ] && ! ldd "$1" >/dev/null 2>&1; }
is_static /bin/busybox || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
[ $BENCH = 1 ] && { command -v strace >/dev/null || need+=(strace); }
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}" >"$WORK/apt.log" 2>&1 ||
         { apt-get update >>"$WORK/apt.log" 2>&1 &&
           DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}" >>"$WORK/apt.log" 2>&1; }; }; then
    skip "apt-get install ${need[*]} failed (see $WORK/apt.log)"
  fi
fi
BUSYBOX=/bin/busybox
is_static "$BUSYBOX" || skip "no static busybox at $BUSYBOX"

# ---- guest kernel and initramfs --------------------------------------------------------
KDIR=$WORK/kernel
if [ ! -f "$KDIR/vmlinuz" ]; then
  log "fetching the guest kernel"
  pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | sed -n 's/.*Depends: \(linux-image-[^ ]*\)/\1/p' | head -1)
  [ -n "$pkg" ] || { apt-get update >/dev/null 2>&1; pkg=$(apt-cache depends linux-image-cloud-amd64 | sed -n 's/.*Depends: \(linux-image-[^ ]*\)/\1/p' | head -1); }
  [ -n "$pkg" ] || skip "no linux-image-cloud-amd64 package to take a guest kernel from"
  rm -rf "$KDIR.tmp" && mkdir -p "$KDIR.tmp" &&
    (cd "$KDIR.tmp" && apt-get download "$pkg" >/dev/null 2>&1 && dpkg-deb -x ./*.deb x) ||
    skip "apt-get download $pkg failed"
  mkdir -p "$KDIR/modules"
  cp "$KDIR.tmp"/x/boot/vmlinuz-* "$KDIR/vmlinuz.new"
  for m in virtio virtio_ring virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_blk; do
    f=$(find "$KDIR.tmp/x/lib/modules" -name "$m.ko*" | head -1)
    [ -n "$f" ] || skip "module $m not in $pkg"
    case "$f" in
      *.xz) xz -dc "$f" >"$KDIR/modules/$m.ko" ;;
      *.zst) zstd -dc "$f" >"$KDIR/modules/$m.ko" ;;
      *) cp "$f" "$KDIR/modules/$m.ko" ;;
    esac
  done
  mv "$KDIR/vmlinuz.new" "$KDIR/vmlinuz"
  rm -rf "$KDIR.tmp"
fi
IRD=$WORK/initramfs
INITRD=$WORK/initramfs.cpio.gz
if [ ! -f "$INITRD" ] || [ scripts/vhost-user/init -nt "$INITRD" ] ||
   [ scripts/vhost-user/guest-io.c -nt "$INITRD" ]; then
  log "building the initramfs"
  rm -rf "$IRD" && mkdir -p "$IRD"/{bin,dev,proc,sys,tmp,lib/modules}
  gcc -O2 -static -Wall -o "$IRD/bin/guest-io" scripts/vhost-user/guest-io.c || skip "gcc -static failed"
  cp "$BUSYBOX" "$IRD/bin/busybox"
  cp scripts/vhost-user/init "$IRD/init" && chmod +x "$IRD/init"
  cp "$KDIR"/modules/*.ko "$IRD/lib/modules/"
  (cd "$IRD" && find . | cpio -o -H newc --quiet | gzip -1) >"$INITRD.new" && mv "$INITRD.new" "$INITRD"
fi

# ---- backend ---------------------------------------------------------------------------
log "building the backend"
# VUBLK_PROFILE=debug: a debug backend (quicker to build while working on it).
PROFILE=${VUBLK_PROFILE:-release}
if [ "$PROFILE" = release ]; then PFLAG=--release; else PFLAG=; fi
nice cargo build $PFLAG --example vhost_user_blk >"$WORK/build.log" 2>&1 ||
  { cat "$WORK/build.log"; echo "0 passed, 1 failed (backend build)"; exit 1; }
BACKEND=${VUBLK_BACKEND:-$ROOT/target/$PROFILE/examples/vhost_user_blk}

SOCK=$WORK/vu.sock
IMG=$WORK/disk.img
BPID=
QPID=
BPIDS=()   # the bench's backends (all running at once)
cleanup() {
  [ -n "$QPID" ] && kill -9 "$QPID" 2>/dev/null
  [ -n "$BPID" ] && kill "$BPID" 2>/dev/null
  for p in "${BPIDS[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
}
trap cleanup EXIT

# start_backend KIND LOG [SOCKET IMAGE]: KIND is evfd, rust-vmm or qsd (default socket and
# image: $SOCK, $IMG); BACKEND_ARGS are added to our backend's arguments, BACKEND_ENV
# (NAME=VALUE ...) to its environment. Sets BPID.
start_backend() {
  local sock=${3:-$SOCK} img=${4:-$IMG}
  rm -f "$sock"
  case "$1" in
    qsd)
      qemu-storage-daemon \
        --blockdev driver=file,node-name=disk,filename="$img",cache.direct=off \
        --export type=vhost-user-blk,id=exp0,node-name=disk,addr.type=unix,addr.path="$sock",writable=on,num-queues=2 \
        >"$2" 2>&1 &
      ;;
    *) env ${BACKEND_ENV:-} "$BACKEND" --socket "$sock" --image "$img" --queues 2 --loop "$1" ${BACKEND_ARGS:-} >"$2" 2>&1 & ;;
  esac
  BPID=$!
  for _ in $(seq 100); do [ -S "$sock" ] && return 0; sleep 0.05; done
  log "backend $1 did not create $sock"; cat "$2" >&2
  return 1
}
stop_backend() {
  [ -n "$BPID" ] && kill "$BPID" 2>/dev/null && wait "$BPID" 2>/dev/null
  BPID=
}

# start_qemu MODE SERIAL_LOG [kernel params]: boots the guest in the background (QPID), with
# one vhost-user-blk-pci disk per socket in QEMU_SOCKS (default: $SOCK alone); with
# QEMU_RECONNECT=N, QEMU reconnects to a backend that went away, every N s.
start_qemu() {
  local mode=$1 out=$2 i=0 disks=() sock; shift 2
  for sock in ${QEMU_SOCKS:-$SOCK}; do
    disks+=(-chardev "socket,id=vu$i,path=$sock${QEMU_RECONNECT:+,reconnect=$QEMU_RECONNECT}"
            -device "vhost-user-blk-pci,chardev=vu$i,num-queues=2")
    i=$((i + 1))
  done
  : >"$out"
  qemu-system-x86_64 -nodefaults -no-user-config -display none -monitor none \
    -accel tcg,thread=multi -smp 2 -m 256M \
    -object memory-backend-memfd,id=mem,size=256M,share=on -numa node,memdev=mem \
    -kernel "$KDIR/vmlinuz" -initrd "$INITRD" \
    -append "console=ttyS0 quiet panic=-1 vublk=$mode $*" \
    -serial file:"$out" -no-reboot \
    "${disks[@]}" \
    >"$out.qemu" 2>&1 &
  QPID=$!
}
# wait_qemu TIMEOUT: waits for the guest to power off; kills it at the timeout.
wait_qemu() {
  local r=0
  wait_exit "$QPID" "$1" || r=1
  QPID=
  return $r
}
# wait_exit PID TIMEOUT: waits for a child to exit; kills it (SIGKILL) at the timeout and
# returns 1.
wait_exit() {
  local t=$(( $2 * 10 ))
  while kill -0 "$1" 2>/dev/null && [ $t -gt 0 ]; do sleep 0.1; t=$((t - 1)); done
  if kill -0 "$1" 2>/dev/null; then kill -9 "$1"; wait "$1" 2>/dev/null; return 1; fi
  wait "$1" 2>/dev/null
  return 0
}
# A process's read/write-family syscalls so far (/proc/PID/io).
rw_calls() { awk '/^sysc[rw]:/ { s += $2 } END { print s }' "/proc/$1/io"; }
# wait_mark LOG NAME TIMEOUT
wait_mark() {
  local t=$(( $3 * 50 ))
  while ! grep -q "VUBLK-MARK $2" "$1" 2>/dev/null; do
    [ $t -gt 0 ] || return 1
    kill -0 "$QPID" 2>/dev/null || return 1
    sleep 0.02; t=$((t - 1))
  done
}
result() { sed -n "s/^VUBLK-RESULT $2 \(ok\|fail\) *\(.*\)/\1 \2/p" "$1" | tr -d '\r' | head -1; }
# The per-queue request counts the backend logged at its last session end.
served() { sed -n 's/.*served per queue: \[\(.*\)\]/\1/p' "$1" | tail -1; }
wait_served() { # LOG COUNT: wait for the COUNT-th session end in the backend's log
  for _ in $(seq 100); do
    [ "$(grep -c 'served per queue' "$1")" -ge "$2" ] && return 0
    sleep 0.05
  done
  return 1
}

if [ $BENCH = 0 ]; then
  PASS=0
  FAIL=0
  check() { # name ok|fail detail
    if [ "$2" = ok ]; then PASS=$((PASS + 1)); else FAIL=$((FAIL + 1)); fi
    printf '%-4s %-34s %s\n' "$2" "$1" "$3"
  }
  # from_result LOOP NAME SERIAL_LOG
  from_result() {
    local r; r=$(result "$3" "$2")
    case "$r" in
      ok*) check "$1 $2" ok "${r#ok }" ;;
      fail*) check "$1 $2" fail "${r#fail }" ;;
      *) check "$1 $2" fail "no result (serial: $(tail -c 300 "$3" | tr '\n\r' '  '))" ;;
    esac
  }
  queues_used() { # LOOP BACKEND_LOG SESSION_NUMBER
    local s
    if wait_served "$2" "$3"; then
      s=$(served "$2")
      if echo "$s" | awk -F', *' '{ exit !($1 > 0 && $2 > 0) }'; then
        check "$1 both-queues" ok "requests per queue: $s"
      else
        check "$1 both-queues" fail "requests per queue: $s"
      fi
    else
      check "$1 both-queues" fail "the backend logged no session end"
    fi
  }
  START=$SECONDS
  for LOOP in ${VUBLK_LOOPS:-evfd rust-vmm}; do
    rm -f "$IMG" && truncate -s 64M "$IMG"
    BLOG=$WORK/backend-$LOOP.log
    start_backend "$LOOP" "$BLOG" || { check "$LOOP backend-start" fail "see $BLOG"; continue; }
    S=$WORK/serial-$LOOP
    # 1. pattern, scatter, both queues.
    start_qemu check "$S-1.log" vublk_seed=1000 vublk_pbs="$(pbs=$(stat -c %o "$IMG"); [ "$pbs" -gt 4096 ] && pbs=4096; echo "$pbs")"
    wait_qemu 150 || log "$LOOP: first guest timed out"
    from_result "$LOOP" pattern "$S-1.log"
    from_result "$LOOP" scatter "$S-1.log"
    from_result "$LOOP" zeroes "$S-1.log"
    from_result "$LOOP" topology "$S-1.log"
    queues_used "$LOOP" "$BLOG" 1
    if [ "$LOOP" = evfd ]; then # rust-vmm's handler does not say how memory came
      n=$(grep -c 'memory region added' "$BLOG")
      if [ "$n" -gt 0 ]; then
        check "$LOOP mem-slots" ok "memory added region by region (CONFIGURE_MEM_SLOTS): $n ADD_MEM_REG"
      else
        check "$LOOP mem-slots" fail "no region added with ADD_MEM_REG (see $BLOG)"
      fi
    fi
    # 2. a second QEMU sees the first one's data.
    start_qemu verify "$S-2.log" vublk_seed=1000
    wait_qemu 150 || log "$LOOP: second guest timed out"
    from_result "$LOOP" second-sees-first "$S-2.log"
    # 3. SIGKILL in the middle of I/O.
    start_qemu hammer "$S-3.log"
    if wait_mark "$S-3.log" hammer 240; then
      sleep 2
      kill -9 "$QPID"; wait "$QPID" 2>/dev/null; QPID=
      if wait_served "$BLOG" 3 && kill -0 "$BPID" 2>/dev/null; then
        check "$LOOP killed-frontend" ok "QEMU SIGKILLed mid-write after $(served "$BLOG" | tr -d ' ' | tr ',' '+') requests; backend reset"
      else
        check "$LOOP killed-frontend" fail "backend gone or no reset (see $BLOG)"
      fi
    else
      kill -9 "$QPID" 2>/dev/null; QPID=
      check "$LOOP killed-frontend" fail "the guest never started writing"
    fi
    # 4. a full fresh run after the kill.
    start_qemu check "$S-4.log" vublk_seed=2000
    wait_qemu 150 || log "$LOOP: fourth guest timed out"
    r1=$(result "$S-4.log" pattern); r2=$(result "$S-4.log" scatter)
    if [ "${r1%% *}" = ok ] && [ "${r2%% *}" = ok ] && wait_served "$BLOG" 4 &&
       served "$BLOG" | awk -F', *' '{ exit !($1 > 0 && $2 > 0) }'; then
      check "$LOOP fresh-after-kill" ok "pattern, scatter, both queues ($(served "$BLOG"))"
    else
      check "$LOOP fresh-after-kill" fail "pattern: $r1 / scatter: $r2 / queues: $(served "$BLOG")"
    fi
    if kill -0 "$BPID" 2>/dev/null; then
      check "$LOOP backend-alive" ok "pid $BPID served 4 frontends"
    else
      check "$LOOP backend-alive" fail "the backend exited (see $BLOG)"
    fi
    stop_backend
    # 5. the same image served read-only.
    BACKEND_ARGS=--read-only start_backend "$LOOP" "$BLOG.ro" ||
      { check "$LOOP read-only" fail "backend did not start (see $BLOG.ro)"; continue; }
    start_qemu ro "$S-5.log"
    wait_qemu 150 || log "$LOOP: read-only guest timed out"
    from_result "$LOOP" read-only "$S-5.log"
    stop_backend
    # 6. backends that die under a guest in the middle of I/O, each followed by a new one on
    #    the same socket, which QEMU (reconnect=1) connects to; the guest writes and verifies
    #    on both vCPUs throughout. evfd loop: the first exits in place of its 1 500th call
    #    (VUBLK_DIE_BEFORE_CALL), its request already in the used ring, so the guest waits
    #    for a call that only the next backend can make (died-before-call). Then, both
    #    loops: one is SIGKILLed wherever it is (restarted-backend).
    die=; [ "$LOOP" = evfd ] && die=VUBLK_DIE_BEFORE_CALL=1500
    BACKEND_ENV=$die start_backend "$LOOP" "$BLOG.1st" ||
      { check "$LOOP restarted-backend" fail "backend did not start (see $BLOG.1st)"; continue; }
    QEMU_RECONNECT=1 start_qemu churn "$S-6.log" vublk_secs=12
    if wait_mark "$S-6.log" churn 240; then
      if [ -n "$die" ]; then
        if wait_exit "$BPID" 60; then
          dbc="ok exited in place of its 1 500th call"
        else
          dbc="fail the backend did not exit at its 1 500th call"
        fi
        BPID=
        sleep 0.5
        start_backend "$LOOP" "$BLOG.2nd" || dbc="fail the backend after it did not start"
        sleep 2
        # Its reads and writes so far (it logs its requests only at a session's end, which
        # the SIGKILL below does not let it reach).
        n2=$(rw_calls "$BPID" 2>/dev/null)
      else
        sleep 3
      fi
      kill -9 "$BPID"; wait "$BPID" 2>/dev/null; BPID=
      sleep 0.5
      start_backend "$LOOP" "$BLOG.3rd" ||
        { check "$LOOP restarted-backend" fail "the backend after the SIGKILL did not start (see $BLOG.3rd)"; }
      wait_qemu 240 || log "$LOOP: churn guest timed out"
      r=$(result "$S-6.log" churn)
      # The deaths must have fallen in the middle of the passes: an I/O waited for them.
      slow=$(echo "$r" | grep -o 'slowest I/O [0-9.]*' | awk '{ if ($3 > m) m = $3 } END { print m + 0 }')
      n3=$(wait_served "$BLOG.3rd" 1 && served "$BLOG.3rd" | awk -F', *' '{ print $1 + $2 }')
      guest="$(echo "${r#ok }" | sed 's/ *$//')"
      if [ -n "$die" ]; then
        if [ "${dbc%% *}" = ok ] && [ "${r%% *}" = ok ] && [ "${n2:-0}" -gt 1000 ]; then
          check "$LOOP died-before-call" ok "${dbc#ok }; the next backend made $n2 reads and writes in 2 s, and the guest's passes went on"
        else
          check "$LOOP died-before-call" fail "${dbc#* }; guest: ${r:-no result}; the next backend made ${n2:-no} reads and writes"
        fi
      fi
      if [ "${r%% *}" = ok ] && awk -v s="$slow" 'BEGIN { exit !(s >= 0.4) }' && [ "${n3:-0}" -gt 0 ]; then
        check "$LOOP restarted-backend" ok "$guest; the backend after the SIGKILL served $n3"
      else
        check "$LOOP restarted-backend" fail "guest: ${r:-no result}; slowest I/O ${slow:-?} s; the backend after the SIGKILL served ${n3:-nothing}"
      fi
    else
      kill -9 "$QPID" 2>/dev/null; QPID=
      check "$LOOP restarted-backend" fail "the guest never started its passes"
    fi
    stop_backend
  done
  echo "$PASS passed, $FAIL failed ($((SECONDS - START)) s)"
  [ $FAIL = 0 ]
  exit
fi

# ---- figures ---------------------------------------------------------------------------
# One guest serves as the workload for every backend at once: each backend serves its own
# disk (its own image) to the same QEMU, and the guest runs its phases on the disks in
# turn — one phase on each disk per round, the order rotating from round to round — so the
# backends are compared under the same guest, the same vCPU threads and the same moment of
# the machine, phase next to phase. Only one disk is busy at a time: each backend's CPU and
# syscalls over a whole section (all the read phases, then all the write phases) are its
# own phases' (an idle backend sleeps in its wait).
TCK=$(getconf CLK_TCK)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# The median (of an even count: the mean of the two middle values).
median() {
  tr ' ' '\n' | grep -v '^$' | sort -g |
    awk '{ v[NR] = $1 } END { if (!NR) print ""; else if (NR % 2) print v[(NR + 1) / 2];
          else { m = (v[NR / 2] + v[NR / 2 + 1]) / 2; if (m == int(m)) print m; else printf "%.3f\n", m } }'
}
OUT=$WORK/bench.txt
CPU=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)
read -r -a BK <<< "${VUBLK_BENCH:-evfd rust-vmm qsd}"
log "figures: ${#BK[@]} backends on one guest, $ROUNDS rounds of $SECS s phases; CPU: $CPU; $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A ROW SIZE_OF PID_OF
# The images: 64 MiB of zeros written in 4 KiB blocks and synced, so every block is
# allocated on disk before the backend starts (no allocation, delayed or unwritten-extent
# work in the measured writes) and the host page cache holds it in 4 KiB pages, the guest's
# I/O size. Written in 1 MiB blocks instead, ext4 (Linux 6.16+) caches it in large folios,
# and each 4 KiB buffered write into one walks the whole folio's block buffers: filesystem
# CPU, the same for every backend, that used to make up most of the write rows
# (docs/benchmarks.md, "vhost-user-blk"). Backend i's image has i MiB more: the guest tells
# its disks apart by size (the I/O stays in the first 64 MiB).
make_bench_image() { # PATH EXTRA_MIB
  rm -f "$1"
  dd if=/dev/zero of="$1" bs=4k count=$((16384 + 256 * $2)) conv=fsync status=none
}
# bench_boot TAG ROUNDS STRACE(0|1): every backend started, one guest, its read and write
# sections; ROW[B,op,*,TAG] filled.
bench_boot() {
  local tag=$1 rounds=$2 st=$3 i B op line d ops iops
  local socks=""
  BPIDS=()
  for i in "${!BK[@]}"; do
    B=${BK[$i]}
    make_bench_image "$WORK/bench-$B.img" "$i"
    SIZE_OF[$(( (16384 + 256 * i) * 8 ))]=$B
    start_backend "$B" "$WORK/bench-backend-$B-$tag.log" "$WORK/vu-$B.sock" "$WORK/bench-$B.img" ||
      { log "$B did not start"; return 1; }
    PID_OF[$B]=$BPID; BPIDS+=("$BPID"); BPID=
    socks="$socks $WORK/vu-$B.sock"
  done
  local S=$WORK/bench-serial-$tag.log
  QEMU_SOCKS=$socks start_qemu bench "$S" vublk_secs="$SECS" vublk_rounds="$rounds" vublk_disks="${#BK[@]}"
  declare -A c0 s0 spid
  for op in read write; do
    wait_mark "$S" "start-$op" 300 || { log "$tag: no start-$op mark (serial: $(tail -c 300 "$S"))"; break; }
    for B in "${BK[@]}"; do
      if [ "$st" = 1 ]; then
        strace -c -f -p "${PID_OF[$B]}" -o "$WORK/strace-$B-$op.txt" 2>/dev/null &
        spid[$B]=$!
      else
        c0[$B]=$(cpu_ticks "${PID_OF[$B]}"); s0[$B]=$(rw_calls "${PID_OF[$B]}")
      fi
    done
    wait_mark "$S" "end-$op" $(( rounds * ${#BK[@]} * (SECS + 5) + 300 )) || { log "$tag: no end-$op mark"; break; }
    for B in "${BK[@]}"; do
      if [ "$st" = 1 ]; then
        kill -INT "${spid[$B]}"; wait "${spid[$B]}" 2>/dev/null
        ROW[$B,$op,all]=$(awk '$NF == "total" { print $4 }' "$WORK/strace-$B-$op.txt" | tail -1)
      else
        ROW[$B,$op,cpu]=$(( $(cpu_ticks "${PID_OF[$B]}") - ${c0[$B]} ))
        ROW[$B,$op,sys]=$(( $(rw_calls "${PID_OF[$B]}") - ${s0[$B]} ))
      fi
    done
  done
  wait_qemu 120
  for p in "${BPIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  BPIDS=()
  # The guest's disks by size (sectors), then its phases: `bench-OP-ROUND-DISK ok <two
  # guest-io lines>` (ops and IOPS of each vCPU).
  declare -A disk_of
  while read -r d sz; do disk_of[$d]=${SIZE_OF[$sz]:-}; done < <(
    sed -n 's/^VUBLK-RESULT disk-\(vd[a-z]*\) ok \([0-9]*\).*/\1 \2/p' "$S" | tr -d '\r')
  while read -r op r d line; do
    B=${disk_of[$d]:-}
    [ -n "$B" ] || continue
    ops=$(echo "$line" | grep -o '[0-9]* ops' | awk '{ s += $1 } END { print s + 0 }')
    iops=$(echo "$line" | grep -o 's [0-9]*' | awk '{ s += $2 } END { print s + 0 }')
    ROW[$B,$op,ops,$tag]=$(( ${ROW[$B,$op,ops,$tag]:-0} + ops ))
    ROW[$B,$op,iops,$tag]="${ROW[$B,$op,iops,$tag]:-} $iops"
  done < <(sed -n 's/^VUBLK-RESULT bench-\(read\|write\)-\([0-9]*\)-\(vd[a-z]*\) ok \(.*\)/\1 \2 \3 \4/p' "$S" | tr -d '\r')
}
bench_boot main "$ROUNDS" 0
log "counting run: every backend under strace"
bench_boot strace 1 1
name() { case $1 in evfd) echo "vhost_user_blk --loop evfd";; rust-vmm) echo "vhost_user_blk --loop rust-vmm";; qsd) echo "qemu-storage-daemon";; esac; }
# ratio_of A B OP: the median over rounds of A's IOPS over B's in the same round.
ratio_of() {
  local a=(${ROW[$1,$3,iops,main]:-}) b=(${ROW[$2,$3,iops,main]:-}) k r=""
  for k in "${!a[@]}"; do
    [ -n "${b[$k]:-}" ] && [ "${b[$k]}" -gt 0 ] && r="$r $(awk -v x="${a[$k]}" -v y="${b[$k]}" 'BEGIN { printf "%.3f", x / y }')"
  done
  echo "$r" | median
}
{
  echo "Guest 4 KiB O_DIRECT random I/O at QD1 on each of 2 vCPUs (QEMU 7.2, TCG, one vhost-user-blk-pci disk with 2 queues per"
  echo "backend, all on one guest; raw 64 MiB images written in 4 KiB blocks and synced, in the host page cache); $ROUNDS rounds of"
  echo "one $SECS s phase per disk, in turn, the order rotating (medians of the rounds), $(date -u +%Y-%m-%d)."
  echo "Machine: $CPU, $(nproc) cores, shared by the guest's vCPUs, the backends and other work (load at start: $(cut -d' ' -f1-3 /proc/loadavg))."
  echo "CPU/request: backend utime+stime (/proc/PID/stat) over all its phases; r/w syscalls/request: backend syscr+syscw"
  echo "(/proc/PID/io); all syscalls/request: a separate guest boot with every backend under strace -c -f. IOPS: both vCPUs summed."
  echo
  echo "| backend | op | guest IOPS | backend CPU/request | r/w syscalls/request | all syscalls/request | IOPS per round |"
  echo "|---|---|---:|---:|---:|---:|---|"
  for B in "${BK[@]}"; do
    for op in read write; do
      ops=${ROW[$B,$op,ops,main]:-0}
      m_iops=$(echo "${ROW[$B,$op,iops,main]:-}" | median)
      if [ "$ops" -gt 0 ]; then
        cpu=$(awk -v c="${ROW[$B,$op,cpu]:-0}" -v t="$TCK" -v o="$ops" 'BEGIN { printf "%.1f µs", c / t * 1e6 / o }')
        sys=$(awk -v s="${ROW[$B,$op,sys]:-0}" -v o="$ops" 'BEGIN { printf "%.2f", s / o }')
      else
        cpu=-; sys=-
      fi
      sops=${ROW[$B,$op,ops,strace]:-0}
      if [ "$sops" -gt 0 ] && [ -n "${ROW[$B,$op,all]:-}" ]; then
        all=$(awk -v s="${ROW[$B,$op,all]}" -v o="$sops" 'BEGIN { printf "%.2f", s / o }')
      else
        all=-
      fi
      echo "| $(name "$B") | $op | ${m_iops:--} | $cpu | $sys | $all |${ROW[$B,$op,iops,main]:-} |"
    done
  done
  if [ "${#BK[@]}" -gt 1 ]; then
    echo
    for op in read write; do
      line="IOPS ratio, $op (median over rounds of the same round's ratio):"
      for B in "${BK[@]:1}"; do line="$line ${BK[0]}/$B $(ratio_of "${BK[0]}" "$B" "$op")"; done
      echo "$line"
    done
  fi
} | tee "$OUT"
if [ $README = 1 ]; then
  mkdir -p docs/data
  cp "$OUT" docs/data/vhost-user-bench.txt
  python3 - "$OUT" <<'PY'
import sys
table = open(sys.argv[1]).read().strip()
p = "README.md"
s = open(p).read()
b, e = "<!-- vhost-user-bench:begin -->", "<!-- vhost-user-bench:end -->"
if b in s and e in s:
    s = s[: s.index(b) + len(b)] + "\n" + table + "\n" + s[s.index(e):]
    open(p, "w").write(s)
    print("README.md: table updated", file=sys.stderr)
PY
fi
