//! The shared-memory segment of a named AV: its layout, its mapping, and its locks.
//!
//! One segment per AV name, a file of `/dev/shm` (what `shm_open` creates on Linux) named
//! [`SHM_PREFIX`] followed by the AV name with every byte outside `[A-Za-z0-9._-]` written as
//! `%XX`; a name whose file name would exceed 255 bytes is cut and ends in `~` and a 64-bit
//! FNV-1a hash of the whole name (the header holds the whole name, and opening checks it).
//! The file is created with mode 0600: the processes sharing an AV run as one user.
//!
//! ## Layout (version [`LAYOUT_VERSION`])
//!
//! Every field is a little-endian `u64` word, and every process reads and writes the segment
//! only with atomic operations on whole words.
//!
//! | bytes | contents |
//! |---|---|
//! | 0..512 | header: the words below, then the AV name |
//! | 512.. | allocation bitmap: bit `i % 64` of word `i / 64` set = index `i` in use |
//! | next 64-byte boundary | change log: [`LOG_RECORDS`] records of 16 bytes, a ring |
//! | next 64-byte boundary | range table: [`RANGE_RECORDS`] records of 64 bytes |
//! | next 64-byte boundary | address slots: `capacity` × 32 bytes, the serialized addresses |
//!
//! Header words (index: field):
//!
//! | word | field |
//! |---|---|
//! | 0 | magic, `"UETAVSHM"` read as a little-endian `u64` ([`MAGIC`]), written last at creation |
//! | 1 | layout version ([`LAYOUT_VERSION`]) |
//! | 2 | capacity (table entries) |
//! | 3 | `rx_ctx_bits` |
//! | 4 | JobID |
//! | 5 | log records (ring size) |
//! | 6, 7, 8 | byte offsets of the bitmap, the log and the slots |
//! | 20 | byte offset of the range table |
//! | 21 | largest peer group id (`max_group_id`; 0: no peer groups) |
//! | 9 | size of the segment in bytes |
//! | 10 | generation: bumped by every committed change (and by a repair) |
//! | 11 | log head: records appended since creation |
//! | 12 | rescan mark: a process that caught up to a log position below it must rescan |
//! | 13 | indices in use |
//! | 14 | high-water mark: one past the highest index ever used (never decreases) |
//! | 15 | free hint: every bitmap word below it is full |
//! | 16 | reference count: handles attached |
//! | 17 | writer: pid of the process in the middle of a change, 0 when the segment is consistent |
//! | 18 | state: 1 live, 2 closed (unlinked by its last handle) |
//! | 19 | pid of the creator |
//! | 24 | length of the AV name in bytes |
//! | 32..64 | the AV name (up to 255 bytes) |
//!
//! A log record is two words: the generation of the change, then the index in the low 32 bits
//! and the operation in the next 8 (1 insert, 2 remove, 3 repair, 4 range inserted: the index
//! is its first, and the top 24 bits its count, 0 for a count that does not fit).
//!
//! A range record describes symmetric-set members inserted at consecutive indices
//! (`fi_av_insertsym`), so that every process holds them as one range in its mirror and its
//! NIC instead of one entry per peer. Words: 0 state (0 free, 1 live), 1 first index (low 32
//! bits) and count (high 32), 2 services per node (low) and the member at the first index
//! (high), 3–6 member 0's address, 7 members still in use. A range record is a description
//! only: the members' slots and bits are written as for single inserts, and they alone say
//! what the AV holds. A process applies a live record as a range where its mirror holds none
//! of the indices, then reconciles each index with its slot; a repair frees every record. The
//! count of members in use is each remover's view, so a record may outlive its members or go
//! before them: a process catching up with a logged range reconciles the range's indices,
//! which its log record names, and those of every live record starting at its first index;
//! for a range logged without its count, which names no indices, it rescans every index (a
//! live record at that first index may be another, smaller range's).
//!
//! An index is in use exactly when its bitmap bit is set and its slot holds an address: a
//! change writes the slot's last three words before its first (whose first byte is never zero
//! in a valid address) and clears the first word first, so a slot is never half valid.
//!
//! ## Locks and liveness
//!
//! Open-file-description record locks (`F_OFD_SETLKW`), which the kernel drops when the
//! holder's file is closed, including when its process dies:
//!
//! - **the lock**, byte 0 of the file: exclusive for a change, shared for catching up;
//! - **presence**, byte 1: every attached handle holds a shared lock on it. A handle that
//!   closes releases its own, then tries an exclusive one without waiting, under the lock:
//!   if it gets it, no other handle is attached (a crashed process holds nothing), so it
//!   marks the segment closed and unlinks it. An open that finds a segment nobody is attached
//!   to (every process that had it died) does the same before creating a new one, so an AV
//!   never outlives its last process by more than the next open of its name.
//!
//! The locks belong to the handle's open file description, which a process forked from the
//! handle's opener would share: the handle stays its opener's. At the fork the child gives up
//! its copies of the descriptor and the mapping, either of which would keep the opener's
//! locks for as long as the child runs, a dead opener's lock included (the private
//! `forked_child` module); its copy of the handle then reads zeros. In a forked process the
//! handle's locks are `FI_EINVAL` (one taken there would not keep the opener out) and
//! dropping it detaches nothing (it would give up the opener's presence); a forked process
//! opens the AV itself.
//!
//! A writer sets the writer word before its first change and clears it when it commits. The
//! lock being free while the writer word is set means a process died in the middle of a
//! change: the next process to take the lock repairs the segment (rebuilds the bitmap from
//! the slots, clearing slots that do not hold a valid address) and moves the rescan mark
//! past every log position, so every process rescans.
//!
//! Creation is atomic: the creator builds the segment in an unnamed file (`O_TMPFILE`; a
//! temporary name where the system has none) and publishes it with `linkat(2)`, so no process
//! ever sees a segment without its header. With `O_TMPFILE` a creator that dies first leaves
//! nothing; with a temporary name (`.uet-av.tmp.<pid>.<n>.<ns>` in [`SHM_DIR`]) it leaves that
//! file, which nothing removes (no process opens it).
//!
//! Opening refuses a segment file that is a symbolic link, that another user owns, or whose
//! mode gives its group or other users any access, reading included (`FI_EACCES`): `/dev/shm`
//! is writable by all, and AV names are known.
#![allow(unsafe_code)]

mod forked_child;

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tracing::{debug, warn};
use uet_fwif::UetAddress;

use crate::errno::{FiErrno, FiError};
use forked_child::Registration;

/// Directory of POSIX shared memory on Linux.
pub const SHM_DIR: &str = "/dev/shm";
/// Prefix of every named-AV segment's file name.
pub const SHM_PREFIX: &str = "uet-av.";
/// Header word 0.
pub const MAGIC: u64 = u64::from_le_bytes(*b"UETAVSHM");
/// The layout this code reads and writes.
pub const LAYOUT_VERSION: u64 = 2;
/// Bytes of the header.
pub const HEADER_BYTES: usize = 512;
/// Bytes of one address slot.
pub const SLOT_BYTES: usize = 32;
/// Records in the change log.
pub const LOG_RECORDS: u64 = 4096;
/// Bytes of one log record.
pub const LOG_RECORD_BYTES: usize = 16;
/// Records in the range table.
pub const RANGE_RECORDS: usize = 64;
/// Bytes of one range record.
pub const RANGE_RECORD_BYTES: usize = 64;
/// Bytes of slots [`Segment::reserve`] backs at a time: 65,536 slots.
const RESERVE_STEP: usize = 2 << 20;

/// File offset of the lock byte and of the presence byte.
const LOCK_BYTE: i64 = 0;
const PRESENCE_BYTE: i64 = 1;

/// Longest file name.
const NAME_MAX: usize = 255;

/// Header word indices.
mod hw {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 1;
    pub const CAPACITY: usize = 2;
    pub const RX_CTX_BITS: usize = 3;
    pub const JOB_ID: usize = 4;
    pub const LOG_RECORDS: usize = 5;
    pub const BITMAP_OFF: usize = 6;
    pub const LOG_OFF: usize = 7;
    pub const SLOTS_OFF: usize = 8;
    pub const SIZE: usize = 9;
    pub const GENERATION: usize = 10;
    pub const LOG_HEAD: usize = 11;
    pub const RESCAN_MARK: usize = 12;
    pub const LIVE: usize = 13;
    pub const HIGH_WATER: usize = 14;
    pub const FREE_HINT: usize = 15;
    pub const REFCOUNT: usize = 16;
    pub const WRITER: usize = 17;
    pub const STATE: usize = 18;
    pub const CREATOR: usize = 19;
    pub const RANGES_OFF: usize = 20;
    pub const MAX_GROUP_ID: usize = 21;
    pub const NAME_LEN: usize = 24;
    pub const NAME: usize = 32;
}

const STATE_LIVE: u64 = 1;
const STATE_CLOSED: u64 = 2;

/// Log operations.
pub const LOG_INSERT: u64 = 1;
/// A removal.
pub const LOG_REMOVE: u64 = 2;
/// A repair after a writer died.
pub const LOG_REPAIR: u64 = 3;
/// A range inserted (the index is its first, and bits 40..64 of the record its count).
pub const LOG_RANGE: u64 = 4;
/// The largest range count a log record holds; a larger one is logged as 0 (unknown).
pub const LOG_RANGE_MAX_COUNT: u32 = (1 << 24) - 1;

/// A live range record of the segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedRange {
    /// Record number in the table.
    pub record: usize,
    /// First index.
    pub first: u32,
    /// Indices covered.
    pub count: u32,
    /// Services per node.
    pub svc: u32,
    /// The set member at `first`.
    pub offset: u32,
    /// Member 0 of the set, serialized.
    pub base: [u8; SLOT_BYTES],
}

/// The changes since a log position.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Indices inserted or removed, ascending.
    pub indices: Vec<u32>,
    /// Ranges inserted: first index and count (0 when the log did not hold it), ascending.
    pub ranges: Vec<(u32, u32)>,
}

/// What a new segment is created with, and what an existing one is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentParams {
    /// Table entries.
    pub capacity: u32,
    /// `rx_ctx_bits`.
    pub rx_ctx_bits: u8,
    /// JobID.
    pub job_id: u32,
    /// Largest peer group id (`max_group_id`; 0: no peer groups).
    pub max_group_id: u32,
}

/// Where each part of a segment of `capacity` entries lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Geometry {
    capacity: u32,
    bitmap_off: usize,
    log_off: usize,
    ranges_off: usize,
    slots_off: usize,
    size: usize,
}

impl Geometry {
    fn new(capacity: u32) -> Option<Geometry> {
        let align = |x: usize| x.checked_add(63).map(|v| v & !63);
        let bitmap_off = HEADER_BYTES;
        let bitmap_bytes = (capacity as usize).div_ceil(64).checked_mul(8)?;
        let log_off = align(bitmap_off.checked_add(bitmap_bytes)?)?;
        let log_bytes = usize::try_from(LOG_RECORDS)
            .ok()?
            .checked_mul(LOG_RECORD_BYTES)?;
        let ranges_off = align(log_off.checked_add(log_bytes)?)?;
        let slots_off = ranges_off.checked_add(RANGE_RECORDS * RANGE_RECORD_BYTES)?;
        let size = slots_off.checked_add((capacity as usize).checked_mul(SLOT_BYTES)?)?;
        Some(Geometry {
            capacity,
            bitmap_off,
            log_off,
            ranges_off,
            slots_off,
            size,
        })
    }
}

/// The file name of the segment of AV `name` (without the directory).
pub fn file_name(name: &str) -> String {
    let mut s = String::from(SHM_PREFIX);
    for &b in name.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            s.push(char::from(b));
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    if s.len() > NAME_MAX {
        // ASCII only, so any cut is on a character boundary.
        s.truncate(NAME_MAX - 17);
        s.push_str(&format!("~{:016x}", fnv1a(name.as_bytes())));
    }
    s
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The path of the segment of AV `name`.
pub fn path_of(name: &str) -> PathBuf {
    Path::new(SHM_DIR).join(file_name(name))
}

/// A fabric error for an OS error of `what`.
fn os_error(what: &str, e: &io::Error) -> FiError {
    let errno = match e.raw_os_error() {
        Some(libc::ENOENT) => FiErrno::FI_ENOENT,
        Some(libc::EACCES) | Some(libc::EPERM) => FiErrno::FI_EACCES,
        Some(libc::ENOMEM) => FiErrno::FI_ENOMEM,
        Some(libc::ENOSPC) => FiErrno::FI_ENOSPC,
        Some(libc::EMFILE) | Some(libc::ENFILE) => FiErrno::FI_EMFILE,
        _ => FiErrno::FI_EIO,
    };
    FiError::new(errno, format!("{what}: {e}"))
}

/// The error of opening the segment file at `path`: `FI_EINVAL` for what cannot be a segment
/// file (a directory, a socket), as for any other file that is not a segment; otherwise
/// [`os_error`] of `what`.
fn open_error(what: &str, path: &Path, e: &io::Error) -> FiError {
    match e.raw_os_error() {
        Some(libc::EISDIR | libc::ENXIO) => FiError::inval(format!(
            "{what}: {} is not a named-AV segment: {e}",
            path.display()
        )),
        _ => os_error(&format!("{what}: opening {}", path.display()), e),
    }
}

/// Refuse a segment file another user owns, or whose mode lets its group or other users open
/// it at all: the processes sharing an AV run as one user. A file of `/dev/shm`
/// (world-writable, with predictable names) that someone else made would let them rewrite the
/// addresses this process sends to, and one they may merely read would let them hold its
/// record locks (a shared lock on the lock byte stops every change, one on the presence byte
/// keeps the last close from removing it). `FI_EACCES`.
fn check_owner(meta: &std::fs::Metadata, path: &Path, name: &str) -> Result<(), FiError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let refuse = |why: String| {
        Err(FiError::new(
            FiErrno::FI_EACCES,
            format!(
                "fi_av_open: named AV '{name}': {} {why}; a named AV is shared by the \
                 processes of one user",
                path.display()
            ),
        ))
    };
    if meta.uid() != me {
        return refuse(format!("belongs to uid {}, not to uid {me}", meta.uid()));
    }
    if meta.mode() & 0o077 != 0 {
        return refuse(format!(
            "has mode {:04o}, which lets other users reach it (0600 expected)",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Whether a lock request waits.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    Yes,
    No,
}

/// Set (`F_RDLCK`, `F_WRLCK`) or release (`F_UNLCK`) an open-file-description lock on one byte
/// of `file`. `Ok(false)` when `wait` is `No` and another description holds a conflicting lock.
fn ofd_lock(file: &File, kind: libc::c_int, byte: i64, wait: Wait) -> io::Result<bool> {
    // SAFETY: `libc::flock` is a plain C struct of integers, for which all-zero bytes are a
    // valid value (and l_pid must be 0 for an OFD lock).
    let mut fl: libc::flock = unsafe { core::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = byte;
    fl.l_len = 1;
    let cmd = match wait {
        Wait::Yes => libc::F_OFD_SETLKW,
        Wait::No => libc::F_OFD_SETLK,
    };
    loop {
        // SAFETY: fcntl(F_OFD_SETLK[W]) reads the `flock` we pass, which lives across the
        // call, on a descriptor `file` keeps open; it touches no other memory.
        let r = unsafe { libc::fcntl(file.as_raw_fd(), cmd, &mut fl as *mut libc::flock) };
        if r == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) | Some(libc::EACCES) if wait == Wait::No => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// A shared mapping of a whole segment file.
struct Mapping {
    ptr: NonNull<AtomicU64>,
    words: usize,
}

// SAFETY: the mapping is process-wide memory, reached only through `&[AtomicU64]`, which is
// safe to use from any thread.
unsafe impl Send for Mapping {}
// SAFETY: as above: every access is an atomic operation.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Map all `len` bytes of `file` (a multiple of 8) read-write and shared.
    fn new(file: &File, len: usize) -> io::Result<Mapping> {
        if len == 0 || !len.is_multiple_of(8) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("size {len} is not a whole number of words"),
            ));
        }
        // SAFETY: a new shared mapping at an address the kernel chooses (no existing memory is
        // affected) of a descriptor `file` keeps open; the result is checked for MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<AtomicU64>())
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        Ok(Mapping {
            ptr,
            words: len / 8,
        })
    }

    /// List this mapping of `file` for a forked child to give up (see
    /// [`forked_child`]); the registration must be dropped before `self` and `file`.
    fn register(&self, file: &File) -> Registration {
        Registration::new(file, self.ptr.as_ptr().cast(), self.words * 8)
    }

    fn words(&self) -> &[AtomicU64] {
        // SAFETY: `ptr` is the start of a live MAP_SHARED mapping of `words * 8` bytes (in a
        // forked child, the anonymous memory `forked_child` put in its place, of the
        // same size and protection), page-aligned (so aligned for AtomicU64), unmapped only
        // when `self` drops, and the slice borrows `self`. Every process touches the segment only through atomic
        // operations on whole words, so shared `AtomicU64` references are sound even while
        // other processes write. This code never changes the file's size after creation; a
        // program that truncated it anyway would make an access fault (SIGBUS), never reach
        // memory outside the mapping.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.words) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly the range mmap returned; no reference into it outlives `self`.
        let r = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.words * 8) };
        if r != 0 {
            warn!(error = %io::Error::last_os_error(), "munmap of a named AV segment failed");
        }
    }
}

/// The words a [`Segment`] reads: the shared mapping of a handle, or a private copy of the
/// start of the file ([`Snapshot::read`], which reads without joining the AV: its copy is
/// private memory, so loads of any ordering, and a stray store, touch no other process; words
/// past the copy read as 0).
enum Words {
    Shared(Mapping),
    Copied(Box<[AtomicU64]>),
}

impl Words {
    fn words(&self) -> &[AtomicU64] {
        match self {
            Words::Shared(m) => m.words(),
            Words::Copied(w) => w,
        }
    }
}

/// An attached handle on a segment. Dropping it detaches (and unlinks the segment when it was
/// the last handle).
pub struct Segment {
    /// Listed for a forked child to give up its share of `file` and `map` (dropped first,
    /// before either goes).
    forked_copy: Registration,
    map: Words,
    file: File,
    geo: Geometry,
    path: PathBuf,
    /// Counted in the header and holding presence (false only while being built).
    attached: bool,
    /// Bytes from the start of the file this process knows are backed ([`Segment::reserve`]).
    reserved: AtomicUsize,
    /// The process that opened the file: a process forked from it shares the open file
    /// description, and with it every lock the handle holds ([`Segment::check_opener`]).
    opener: u32,
}

impl core::fmt::Debug for Segment {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Segment")
            .field("path", &self.path)
            .field("capacity", &self.geo.capacity)
            .finish_non_exhaustive()
    }
}

/// Check an AV name for the segment header, which holds at most [`NAME_MAX`] bytes.
fn check_name(name: &str) -> Result<(), FiError> {
    if name.is_empty() || name.len() > NAME_MAX || name.contains('\0') {
        return Err(FiError::inval(format!(
            "an AV name is 1 to {NAME_MAX} bytes without NUL ({} given)",
            name.len()
        )));
    }
    Ok(())
}

/// The geometry a segment header of this layout (`header`, its words) describes, if it has
/// the magic and this layout's version; its other words are not looked at.
fn header_geometry(header: &[AtomicU64]) -> Option<Geometry> {
    let w = |i: usize| header.get(i).map(|w| w.load(Ordering::Relaxed));
    if w(hw::MAGIC)? != MAGIC || w(hw::VERSION)? != LAYOUT_VERSION {
        return None;
    }
    u32::try_from(w(hw::CAPACITY)?).ok().and_then(Geometry::new)
}

/// The size of the segment file `file` ([`Snapshot::read`]). `InvalidData` when it is not a
/// regular file, is smaller than a header or not whole words.
fn segment_size(file: &File) -> io::Result<usize> {
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    let size = usize::try_from(meta.len()).unwrap_or(usize::MAX);
    if size < HEADER_BYTES || !size.is_multiple_of(8) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{size} bytes"),
        ));
    }
    Ok(size)
}

/// The first `size` bytes of `file` (whole words, its size at most) as words of private
/// memory ([`Snapshot::read`], and the header [`Segment::attach`] looks at before it maps the
/// file). `OutOfMemory` when no memory can hold them.
fn copy_words(file: &File, size: usize) -> io::Result<Box<[AtomicU64]>> {
    use std::os::unix::fs::FileExt;
    let mut words = Vec::new();
    words
        .try_reserve_exact(size / 8)
        .map_err(|e| io::Error::new(io::ErrorKind::OutOfMemory, e.to_string()))?;
    let mut chunk = vec![0u8; 64 * 1024];
    let mut at = 0usize;
    while at < size {
        let n = (size - at).min(chunk.len());
        let buf = chunk.get_mut(..n).unwrap_or_default();
        file.read_exact_at(buf, at as u64)?;
        words.extend(
            buf.chunks_exact(8)
                .map(|w| AtomicU64::new(u64::from_le_bytes(w.try_into().unwrap_or_default()))),
        );
        at += n;
    }
    Ok(words.into_boxed_slice())
}

/// Why opening an existing file did not give a segment.
enum Attach {
    /// The file went away or was closed by its last handle: look again.
    Gone,
    Failed(FiError),
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Where a process's open files are named, for `linkat(2)` of an `O_TMPFILE` file.
const PROC_SELF_FD: &str = "/proc/self/fd";

/// A file of [`SHM_DIR`] for a new segment, mode 0600, and its temporary name if it has one.
/// When `unnamed`, an unnamed file (`O_TMPFILE`): a creator that dies before publishing it
/// leaves nothing behind. Otherwise, or where the kernel or file system has no `O_TMPFILE`,
/// or no procfs to publish it through, a named temporary file ([`named_temp`]).
///
/// The mode is set again once the file is made: the one `open(2)` gives goes through the
/// creator's umask, and one that took the owner's write bit (umask 0277) would make a segment
/// the next process of the AV could not open for writing.
fn new_segment_file(unnamed: bool) -> io::Result<(File, Option<PathBuf>)> {
    let (file, tmp) = new_file_under_umask(unnamed)?;
    if let Err(e) = file.set_permissions(std::fs::Permissions::from_mode(0o600)) {
        if let Some(tmp) = &tmp {
            let _ = std::fs::remove_file(tmp);
        }
        return Err(e);
    }
    Ok((file, tmp))
}

/// [`new_segment_file`] before its mode is set again.
fn new_file_under_umask(unnamed: bool) -> io::Result<(File, Option<PathBuf>)> {
    if unnamed && Path::new(PROC_SELF_FD).is_dir() {
        match OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_TMPFILE)
            .open(SHM_DIR)
        {
            Ok(file) => return Ok((file, None)),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
                ) => {}
            Err(e) => return Err(e),
        }
    }
    let (file, tmp) = named_temp(Path::new(SHM_DIR))?;
    Ok((file, Some(tmp)))
}

/// A new file of `dir`, mode 0600, named `.uet-av.tmp.<pid>.<n>.<nanoseconds>`: a name
/// taken already (a creator of the same process id that died, in this or another PID
/// namespace sharing the directory) is passed over for the next.
fn named_temp(dir: &Path) -> io::Result<(File, PathBuf)> {
    let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
    for _ in 0..OPEN_ATTEMPTS {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let tmp = dir.join(format!(
            ".{SHM_PREFIX}tmp.{}.{}.{nanos}",
            std::process::id(),
            TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
        {
            Ok(file) => return Ok((file, tmp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// Give the built segment `file` the name `path`, atomically: `AlreadyExists` when another
/// process published one first. `tmp` is its temporary name, `None` for an `O_TMPFILE` file
/// (linked through procfs, as open(2) shows).
fn publish(file: &File, tmp: Option<&Path>, path: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    if let Some(tmp) = tmp {
        return std::fs::hard_link(tmp, path);
    }
    let from = std::ffi::CString::new(format!("{PROC_SELF_FD}/{}", file.as_raw_fd()))
        .map_err(io::Error::other)?;
    let to = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: both paths are NUL-terminated C strings that live across the call; linkat
    // only reads them.
    let r = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Attempts at creating or opening before giving up (each lost race costs one).
const OPEN_ATTEMPTS: u32 = 64;

impl Segment {
    /// Open the segment of AV `name`, or create it with `params` when it does not exist and
    /// `create` is set. Returns the segment and whether this call created it. An existing
    /// segment is returned as it is: the caller compares its attributes. `FI_ENOENT` when it
    /// does not exist and `create` is not set; `FI_EACCES` when the file's permissions refuse
    /// this user; `FI_EINVAL` when the file is not a named-AV segment of this layout (a
    /// directory or socket in its place included), holds another name, or describes a table of
    /// no entries, and when `params` would create one.
    pub fn open(
        name: &str,
        create: bool,
        params: SegmentParams,
    ) -> Result<(Segment, bool), FiError> {
        // The header holds at most NAME_MAX bytes of name (AvName checks as much for NamedAv;
        // this is for callers of this function).
        check_name(name).map_err(|e| e.within("fi_av_open"))?;
        let path = path_of(name);
        for _ in 0..OPEN_ATTEMPTS {
            match OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
            {
                Ok(file) => match Self::attach(file, &path, name) {
                    Ok(seg) => return Ok((seg, false)),
                    Err(Attach::Gone) => continue,
                    Err(Attach::Failed(e)) => return Err(e),
                },
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    if !create {
                        return Err(FiError::new(
                            FiErrno::FI_ENOENT,
                            format!(
                                "fi_av_open: FI_READ: no named AV '{name}' exists (no {})",
                                path.display()
                            ),
                        ));
                    }
                    if let Some(seg) = Self::create(&path, name, params)? {
                        return Ok((seg, true));
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                    return Err(FiError::new(
                        FiErrno::FI_EACCES,
                        format!(
                            "fi_av_open: named AV '{name}': {} is a symbolic link, not a \
                             segment file",
                            path.display()
                        ),
                    ))
                }
                Err(e) => {
                    return Err(open_error(
                        &format!("fi_av_open: named AV '{name}'"),
                        &path,
                        &e,
                    ))
                }
            }
        }
        Err(FiError::new(
            FiErrno::FI_EBUSY,
            format!(
                "fi_av_open: named AV '{name}': {} was created and closed under this call \
                 {OPEN_ATTEMPTS} times",
                path.display()
            ),
        ))
    }

    /// Build a segment in a new file ([`new_segment_file`]) and publish it as `path`.
    /// `Ok(None)` when another process published one first.
    fn create(path: &Path, name: &str, params: SegmentParams) -> Result<Option<Segment>, FiError> {
        let ctx = |what: &str| format!("fi_av_open: creating named AV '{name}': {what}");
        if params.capacity == 0 {
            return Err(FiError::inval(ctx("count 0: an AV has at least one entry")));
        }
        let geo = Geometry::new(params.capacity).ok_or_else(|| {
            FiError::inval(ctx(&format!("count {} is too large", params.capacity)))
        })?;
        // An unnamed file first; a named temporary where the system cannot publish one
        // (procfs without `linkat` through it, as in some sandboxes).
        let mut published = Ok(None);
        for unnamed in [true, false] {
            let (file, tmp) =
                new_segment_file(unnamed).map_err(|e| os_error(&ctx("a new file"), &e))?;
            // From here on, a temporary name, if the file has one, goes whatever happens.
            let built = Self::build(file, geo, path, name, params, &ctx);
            let outcome = built.map(|seg| (publish(&seg.file, tmp.as_deref(), path), seg));
            if let Some(tmp) = &tmp {
                if let Err(e) = std::fs::remove_file(tmp) {
                    warn!(path = %tmp.display(), error = %e, "removing a temporary segment file failed");
                }
            }
            published = match outcome {
                Err(e) => Err(e),
                Ok((Ok(()), seg)) => Ok(Some(seg)),
                Ok((Err(e), _)) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
                Ok((Err(e), _)) if tmp.is_none() => {
                    debug!(error = %e, "publishing an unnamed segment file failed; a named one instead");
                    continue;
                }
                Ok((Err(e), _)) => Err(os_error(
                    &ctx(&format!("publishing {}", path.display())),
                    &e,
                )),
            };
            break;
        }
        let mut seg = published?;
        if let Some(s) = seg.as_mut() {
            s.attached = true;
            debug!(path = %path.display(), capacity = params.capacity, "named AV segment created");
        }
        Ok(seg)
    }

    fn build(
        file: File,
        geo: Geometry,
        path: &Path,
        name: &str,
        params: SegmentParams,
        ctx: &dyn Fn(&str) -> String,
    ) -> Result<Segment, FiError> {
        file.set_len(geo.size as u64)
            .map_err(|e| os_error(&ctx(&format!("sizing {} bytes", geo.size)), &e))?;
        let map = Mapping::new(&file, geo.size).map_err(|e| os_error(&ctx("mmap"), &e))?;
        let seg = Segment {
            forked_copy: map.register(&file),
            map: Words::Shared(map),
            file,
            geo,
            path: path.to_path_buf(),
            attached: false,
            reserved: AtomicUsize::new(0),
            opener: std::process::id(),
        };
        // Everything but the slots is written from the start; slots are backed as indices are
        // first taken (Locked::alloc).
        seg.reserve(geo.slots_off)
            .map_err(|e| os_error(&ctx(&format!("reserving {} bytes", geo.slots_off)), &e))?;
        let set = |w: usize, v: u64| seg.set_word(w, v);
        set(hw::VERSION, LAYOUT_VERSION);
        set(hw::CAPACITY, u64::from(params.capacity));
        set(hw::RX_CTX_BITS, u64::from(params.rx_ctx_bits));
        set(hw::JOB_ID, u64::from(params.job_id));
        set(hw::MAX_GROUP_ID, u64::from(params.max_group_id));
        set(hw::LOG_RECORDS, LOG_RECORDS);
        set(hw::BITMAP_OFF, geo.bitmap_off as u64);
        set(hw::LOG_OFF, geo.log_off as u64);
        set(hw::SLOTS_OFF, geo.slots_off as u64);
        set(hw::RANGES_OFF, geo.ranges_off as u64);
        set(hw::SIZE, geo.size as u64);
        set(hw::REFCOUNT, 1);
        set(hw::STATE, STATE_LIVE);
        set(hw::CREATOR, u64::from(std::process::id()));
        set(hw::NAME_LEN, name.len() as u64);
        for (k, chunk) in name.as_bytes().chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w.iter_mut().zip(chunk).for_each(|(d, s)| *d = *s);
            set(hw::NAME + k, u64::from_le_bytes(w));
        }
        ofd_lock(&seg.file, libc::F_RDLCK, PRESENCE_BYTE, Wait::Yes)
            .map_err(|e| os_error(&ctx("presence lock"), &e))?;
        seg.word(hw::MAGIC).store(MAGIC, Ordering::Release);
        Ok(seg)
    }

    /// Attach to the existing segment file `file`.
    /// A segment not attached, of `size` bytes mapped at `map`, whose header is yet to be
    /// checked: only the header is read until [`Segment::check_header`] gives the geometry.
    fn unchecked(map: Words, file: File, path: &Path, size: usize) -> Segment {
        Segment {
            forked_copy: Registration::none(),
            map,
            file,
            geo: Geometry {
                capacity: 0,
                bitmap_off: HEADER_BYTES,
                log_off: HEADER_BYTES,
                ranges_off: HEADER_BYTES,
                slots_off: HEADER_BYTES,
                size,
            },
            path: path.to_path_buf(),
            attached: false,
            reserved: AtomicUsize::new(0),
            opener: std::process::id(),
        }
    }

    fn attach(file: File, path: &Path, name: &str) -> Result<Segment, Attach> {
        let meta = file
            .metadata()
            .map_err(|e| Attach::Failed(os_error("fi_av_open: fstat", &e)))?;
        check_owner(&meta, path, name).map_err(Attach::Failed)?;
        let size = usize::try_from(meta.len()).unwrap_or(usize::MAX);
        if size < HEADER_BYTES || !size.is_multiple_of(8) {
            return Err(Attach::Failed(FiError::inval(format!(
                "fi_av_open: named AV '{name}': {} is not a named-AV segment ({size} bytes)",
                path.display()
            ))));
        }
        // The whole file is mapped only when its header describes a segment of its size: a
        // file that is none, however large, is looked at through its header alone, which is
        // all that the checks under the lock read of it.
        let described = copy_words(&file, HEADER_BYTES)
            .ok()
            .and_then(|h| header_geometry(&h))
            .is_some_and(|g| g.size == size);
        let map = Mapping::new(&file, if described { size } else { HEADER_BYTES })
            .map_err(|e| Attach::Failed(os_error("fi_av_open: mmap", &e)))?;
        let forked_copy = map.register(&file);
        let mut seg = Segment::unchecked(Words::Shared(map), file, path, size);
        seg.forked_copy = forked_copy;
        ofd_lock(&seg.file, libc::F_WRLCK, LOCK_BYTE, Wait::Yes)
            .map_err(|e| Attach::Failed(os_error("fi_av_open: taking the segment lock", &e)))?;
        let attached = seg.attach_locked(name, size, &meta);
        seg.unlock_file();
        attached.map(|()| seg)
    }

    /// The part of [`Segment::attach`] done under the lock.
    fn attach_locked(
        &mut self,
        name: &str,
        size: usize,
        meta: &std::fs::Metadata,
    ) -> Result<(), Attach> {
        let same_file = |path: &Path| {
            std::fs::metadata(path).is_ok_and(|m| m.ino() == meta.ino() && m.dev() == meta.dev())
        };
        self.geo = match self.check_header(name, size) {
            // A header that describes more than was mapped changed since it was first read.
            Ok(geo) if self.map.words().len() * 8 < geo.size => {
                return Err(Attach::Failed(FiError::inval(format!(
                    "fi_av_open: named AV '{name}': {} has a corrupt header (it changed while \
                     being opened)",
                    self.path.display()
                ))))
            }
            Ok(geo) => geo,
            Err(refused) => {
                // A segment of another layout version (or with a corrupt header) that no
                // process holds was left by processes that all died, perhaps of an older
                // library: it goes, as an abandoned one of this layout does, rather than
                // block its name for ever. A file without the magic is not touched.
                let ours = self.word(hw::MAGIC).load(Ordering::Acquire) == MAGIC;
                if ours && same_file(&self.path) && self.nobody_attached()? {
                    debug!(path = %self.path.display(), "removing an abandoned named AV segment of another layout");
                    self.unlink_abandoned();
                    return Err(Attach::Gone);
                }
                return Err(refused);
            }
        };
        // A closing handle marks the segment closed and unlinks it under the lock: one found
        // elsewhere than at its path is gone.
        if !same_file(&self.path) {
            return Err(Attach::Gone);
        }
        // Closed yet still at its path, under the lock: its last handle died between the two
        // (or could not unlink it). Nobody is attached to a closed segment; it goes, and this
        // open starts afresh, rather than the name being blocked until someone removes it.
        // Handles attached to a segment that is not live can only mean its state word was
        // overwritten (a segment is marked closed by its last handle, under the lock): a
        // corrupt header, which looking again would only find again.
        let state = self.hdr(hw::STATE);
        if state != STATE_LIVE {
            if self.nobody_attached()? {
                debug!(path = %self.path.display(), "removing a closed named AV segment left at its path");
                self.unlink_abandoned();
                return Err(Attach::Gone);
            }
            return Err(Attach::Failed(FiError::inval(format!(
                "fi_av_open: named AV '{name}': {} has a corrupt header (state {state:#x}, \
                 not live, while handles are attached to it)",
                self.path.display()
            ))));
        }
        // No handle attached: every process that had it open died. The AV went with them,
        // as with a last close; this open starts afresh.
        if self.nobody_attached()? {
            debug!(path = %self.path.display(), "removing a named AV segment whose processes all died");
            self.set_word(hw::STATE, STATE_CLOSED);
            self.unlink_abandoned();
            return Err(Attach::Gone);
        }
        if self.hdr(hw::WRITER) != 0 {
            self.repair();
        }
        ofd_lock(&self.file, libc::F_RDLCK, PRESENCE_BYTE, Wait::Yes)
            .map_err(|e| Attach::Failed(os_error("fi_av_open: presence lock", &e)))?;
        self.word(hw::REFCOUNT).fetch_add(1, Ordering::Relaxed);
        self.attached = true;
        Ok(())
    }

    /// Whether no handle holds presence (every process that had the segment died). Takes the
    /// presence byte exclusively when so: [`Segment::unlink_abandoned`] gives it back.
    fn nobody_attached(&self) -> Result<bool, Attach> {
        ofd_lock(&self.file, libc::F_WRLCK, PRESENCE_BYTE, Wait::No)
            .map_err(|e| Attach::Failed(os_error("fi_av_open: presence probe", &e)))
    }

    /// Unlink a segment [`Segment::nobody_attached`] found abandoned, and release presence.
    fn unlink_abandoned(&self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            warn!(path = %self.path.display(), error = %e, "unlinking an abandoned segment failed");
        }
        let _ = ofd_lock(&self.file, libc::F_UNLCK, PRESENCE_BYTE, Wait::Yes);
    }

    /// The geometry the header describes, if it is a segment of this layout named `name`.
    fn check_header(&self, name: &str, size: usize) -> Result<Geometry, Attach> {
        let fail = |what: String| {
            Attach::Failed(FiError::inval(format!(
                "fi_av_open: named AV '{name}': {} {what}",
                self.path.display()
            )))
        };
        let w = |i: usize| self.word(i).load(Ordering::Relaxed);
        if self.word(hw::MAGIC).load(Ordering::Acquire) != MAGIC {
            return Err(fail("is not a named-AV segment (bad magic)".into()));
        }
        if w(hw::VERSION) != LAYOUT_VERSION {
            return Err(fail(format!(
                "has layout version {}; this library reads version {LAYOUT_VERSION}",
                w(hw::VERSION)
            )));
        }
        // Every AV has at least one entry (AvAttr::resolve, Segment::create): a table of none
        // was never made by this library.
        if w(hw::CAPACITY) == 0 {
            return Err(fail("has a corrupt header (a table of 0 entries)".into()));
        }
        let geo = u32::try_from(w(hw::CAPACITY))
            .ok()
            .and_then(Geometry::new)
            .filter(|g| {
                w(hw::LOG_RECORDS) == LOG_RECORDS
                    && w(hw::BITMAP_OFF) == g.bitmap_off as u64
                    && w(hw::LOG_OFF) == g.log_off as u64
                    && w(hw::SLOTS_OFF) == g.slots_off as u64
                    && w(hw::RANGES_OFF) == g.ranges_off as u64
                    && w(hw::SIZE) == g.size as u64
                    && g.size == size
            })
            .ok_or_else(|| fail("has a corrupt header (sizes and offsets disagree)".into()))?;
        if self.stored_name().as_deref() != Some(name) {
            return Err(fail(format!(
                "holds the AV '{}', not this one",
                self.stored_name().unwrap_or_default()
            )));
        }
        Ok(geo)
    }

    fn stored_name(&self) -> Option<String> {
        let len = usize::try_from(self.word(hw::NAME_LEN).load(Ordering::Relaxed)).ok()?;
        if len > NAME_MAX {
            return None;
        }
        let mut bytes = Vec::with_capacity(len.div_ceil(8) * 8);
        for k in 0..len.div_ceil(8) {
            bytes.extend_from_slice(
                &self
                    .word(hw::NAME + k)
                    .load(Ordering::Relaxed)
                    .to_le_bytes(),
            );
        }
        bytes.truncate(len);
        String::from_utf8(bytes).ok()
    }

    /// The word at word index `i`. The header's words always exist (the file holds at least
    /// the header); other indices come from the checked geometry.
    fn word(&self, i: usize) -> &AtomicU64 {
        static ZERO: AtomicU64 = AtomicU64::new(0);
        // An index outside the mapping would be a bug here; a dummy word keeps it harmless.
        self.map.words().get(i).unwrap_or(&ZERO)
    }

    fn set_word(&self, i: usize, v: u64) {
        self.word(i).store(v, Ordering::Relaxed);
    }

    fn hdr(&self, i: usize) -> u64 {
        self.word(i).load(Ordering::Relaxed)
    }

    /// Back the first `end` bytes of the file with memory (`posix_fallocate`), so that no
    /// store to them can fault. The file is sized sparse: on a full `/dev/shm` (a container's
    /// small default, say) a store to a page the filesystem cannot supply would kill the
    /// process with SIGBUS; reserved first, it is `ENOSPC` here instead. Past what is backed,
    /// asks for [`RESERVE_STEP`] more at once (capped at the file's size) so that inserts make
    /// few system calls, and for just `end` when that much is not to be had.
    fn reserve(&self, end: usize) -> io::Result<()> {
        let have = self.reserved.load(Ordering::Relaxed);
        if end <= have {
            return Ok(());
        }
        let ahead = end
            .max(have.saturating_add(RESERVE_STEP))
            .min(self.geo.size);
        let backed = self
            .fallocate(have, ahead)
            .or_else(|e| match e.raw_os_error() {
                Some(libc::ENOSPC) if ahead > end => self.fallocate(have, end),
                _ => Err(e),
            })?;
        self.reserved.fetch_max(backed, Ordering::Relaxed);
        Ok(())
    }

    /// `posix_fallocate` of bytes `from..to` of the file; `to` when done.
    fn fallocate(&self, from: usize, to: usize) -> io::Result<usize> {
        let (Ok(offset), Ok(len)) = (
            libc::off_t::try_from(from),
            libc::off_t::try_from(to.saturating_sub(from)),
        ) else {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        };
        loop {
            // SAFETY: posix_fallocate takes a descriptor `self.file` keeps open and two
            // integers; it touches no memory of this process.
            let rc = unsafe { libc::posix_fallocate(self.file.as_raw_fd(), offset, len) };
            match rc {
                0 => return Ok(to),
                // A signal arrived first: what was done stays done, the rest is asked again.
                libc::EINTR => continue,
                _ => return Err(io::Error::from_raw_os_error(rc)),
            }
        }
    }

    fn unlock_file(&self) {
        if let Err(e) = ofd_lock(&self.file, libc::F_UNLCK, LOCK_BYTE, Wait::Yes) {
            warn!(error = %e, "releasing the named AV segment lock failed");
        }
    }

    /// `FI_EINVAL` in a process forked from the one that opened the segment. The record locks
    /// belong to the open file description, which the fork shares: a lock taken through it
    /// would not keep the other process out (two writers at once), and releasing one would
    /// release the other's. A forked process opens the AV itself.
    fn check_opener(&self) -> Result<(), FiError> {
        let me = std::process::id();
        if me != self.opener {
            return Err(FiError::inval(format!(
                "named AV: {} was opened by process {}, and process {me} was forked from it: \
                 the handle's locks are that process's; open the AV in this one",
                self.path.display(),
                self.opener
            )));
        }
        Ok(())
    }

    /// Take the lock: exclusive for a change, shared to catch up. A segment left inconsistent
    /// by a writer that died is repaired first (under an exclusive lock, which is then kept).
    /// `FI_EINVAL` in a process forked from the one that opened the segment.
    pub fn lock(&self, exclusive: bool) -> Result<Locked<'_>, FiError> {
        self.check_opener()?;
        let take = |kind| {
            ofd_lock(&self.file, kind, LOCK_BYTE, Wait::Yes)
                .map_err(|e| os_error("named AV: taking the segment lock", &e))
        };
        take(if exclusive {
            libc::F_WRLCK
        } else {
            libc::F_RDLCK
        })?;
        let mut locked = Locked {
            seg: self,
            exclusive,
        };
        if self.hdr(hw::WRITER) != 0 {
            if !exclusive {
                // Release, then wait for the exclusive lock (two readers converting in place
                // would wait for each other), and look again once it is held.
                self.unlock_file();
                take(libc::F_WRLCK)?;
                locked.exclusive = true;
            }
            if self.hdr(hw::WRITER) != 0 {
                self.repair();
            }
        }
        Ok(locked)
    }

    /// The lock, when it can be had at once: shared, or exclusive after repairing the
    /// segment when a writer died in the middle of a change; `None` when another handle holds
    /// it (a change in progress, a catch-up while a repair is due). For the datapath's
    /// catch-up, which never waits, and which must not stay behind for good because a writer
    /// died after others committed changes. `FI_EINVAL` in a process forked from the one that
    /// opened the segment.
    pub fn try_lock_shared(&self) -> Result<Option<Locked<'_>>, FiError> {
        self.check_opener()?;
        let take = |kind| {
            ofd_lock(&self.file, kind, LOCK_BYTE, Wait::No)
                .map_err(|e| os_error("named AV: taking the segment lock", &e))
        };
        if !take(libc::F_RDLCK)? {
            return Ok(None);
        }
        let mut locked = Locked {
            seg: self,
            exclusive: false,
        };
        if self.hdr(hw::WRITER) != 0 {
            // A writer died mid-change: the repair wants the lock exclusive. Converting this
            // description's shared lock fails at once while another holds the lock (dropping
            // `locked` then releases it).
            if !take(libc::F_WRLCK)? {
                return Ok(None);
            }
            locked.exclusive = true;
            if self.hdr(hw::WRITER) != 0 {
                self.repair();
            }
        }
        Ok(Some(locked))
    }

    /// Make the segment consistent after a writer died in the middle of a change.
    fn repair(&self) {
        let writer = self.hdr(hw::WRITER);
        warn!(
            path = %self.path.display(),
            writer,
            "a process died in the middle of a change to this named AV; repairing it"
        );
        // Every index a writer may have touched: below the high-water mark, or with its bit
        // set (a writer that died between taking an index and raising the mark).
        let high = self.scan_end();
        self.set_word(hw::HIGH_WATER, u64::from(high));
        let mut live = 0;
        for i in 0..high {
            let valid = self
                .read_slot(i)
                .is_some_and(|s| UetAddress::bytes_are_valid(&s));
            if valid {
                self.set_bit(i, true);
                live += 1;
            } else {
                self.clear_slot(i);
                self.set_bit(i, false);
            }
        }
        self.set_word(hw::LIVE, live);
        self.set_word(hw::FREE_HINT, 0);
        self.clear_ranges();
        self.append_log(LOG_REPAIR, 0);
        self.set_word(hw::RESCAN_MARK, self.hdr(hw::LOG_HEAD));
        self.word(hw::GENERATION).fetch_add(1, Ordering::Release);
        self.set_word(hw::WRITER, 0);
    }

    /// The generation (an acquire load: the changes it counts are visible after it).
    pub fn generation(&self) -> u64 {
        self.word(hw::GENERATION).load(Ordering::Acquire)
    }

    /// Table entries.
    pub fn capacity(&self) -> u32 {
        self.geo.capacity
    }

    /// `rx_ctx_bits` the AV was created with.
    pub fn rx_ctx_bits(&self) -> u64 {
        self.hdr(hw::RX_CTX_BITS)
    }

    /// JobID the AV was created with.
    pub fn job_id(&self) -> u64 {
        self.hdr(hw::JOB_ID)
    }

    /// The AV's largest peer group id (0: no peer groups).
    pub fn max_group_id(&self) -> u64 {
        self.hdr(hw::MAX_GROUP_ID)
    }

    /// Handles attached (a crashed process's handle is counted until the last close).
    pub fn refcount(&self) -> u64 {
        self.hdr(hw::REFCOUNT)
    }

    /// The segment's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn bitmap_word(&self, index: u32) -> &AtomicU64 {
        self.word(self.geo.bitmap_off / 8 + index as usize / 64)
    }

    fn bit(&self, index: u32) -> bool {
        index < self.geo.capacity
            && (self.bitmap_word(index).load(Ordering::Relaxed) >> (index % 64)) & 1 == 1
    }

    fn set_bit(&self, index: u32, on: bool) {
        if index >= self.geo.capacity {
            return;
        }
        let mask = 1u64 << (index % 64);
        let w = self.bitmap_word(index);
        if on {
            w.fetch_or(mask, Ordering::Relaxed);
        } else {
            w.fetch_and(!mask, Ordering::Relaxed);
        }
    }

    fn slot_word(&self, index: u32, k: usize) -> &AtomicU64 {
        self.word(self.geo.slots_off / 8 + index as usize * (SLOT_BYTES / 8) + k)
    }

    fn read_slot(&self, index: u32) -> Option<[u8; SLOT_BYTES]> {
        if index >= self.geo.capacity {
            return None;
        }
        let mut out = [0u8; SLOT_BYTES];
        for (k, chunk) in out.chunks_exact_mut(8).enumerate() {
            chunk.copy_from_slice(
                &self
                    .slot_word(index, k)
                    .load(Ordering::Relaxed)
                    .to_le_bytes(),
            );
        }
        (out[0] != 0).then_some(out)
    }

    fn clear_slot(&self, index: u32) {
        if index >= self.geo.capacity {
            return;
        }
        for k in 0..SLOT_BYTES / 8 {
            self.slot_word(index, k).store(0, Ordering::Relaxed);
        }
    }

    /// The address at `index`, when the index is in use and holds a valid address.
    pub fn slot(&self, index: u32) -> Option<[u8; SLOT_BYTES]> {
        if !self.bit(index) {
            return None;
        }
        self.read_slot(index).filter(UetAddress::bytes_are_valid)
    }

    /// One past the highest index ever used.
    pub fn high_water(&self) -> u32 {
        self.hdr(hw::HIGH_WATER).min(u64::from(self.geo.capacity)) as u32
    }

    /// One past the highest index a rescan looks at: the high-water mark, or one past the
    /// highest bit set in the bitmap when that is higher (a writer that died between taking
    /// an index and raising the mark, or a mark another process overwrote).
    pub fn scan_end(&self) -> u32 {
        let words = self.geo.capacity.div_ceil(64);
        let top_bit = (0..words)
            .rev()
            .find_map(|w| {
                let bits = self
                    .word(self.geo.bitmap_off / 8 + w as usize)
                    .load(Ordering::Relaxed);
                // Saturating: a capacity within 64 of 2^32 would overflow u32 here.
                (bits != 0).then(|| {
                    w.saturating_mul(64)
                        .saturating_add(64 - bits.leading_zeros())
                })
            })
            .unwrap_or(0);
        self.high_water().max(top_bit.min(self.geo.capacity))
    }

    /// Indices in use.
    pub fn live(&self) -> u64 {
        self.hdr(hw::LIVE)
    }

    /// Records appended to the log since creation.
    pub fn log_head(&self) -> u64 {
        self.hdr(hw::LOG_HEAD)
    }

    /// The indices changed since log position `from`, or `None` when the log no longer holds
    /// them all (the caller rescans).
    pub fn changes_since(&self, from: u64) -> Option<Changes> {
        let head = self.log_head();
        if from < self.hdr(hw::RESCAN_MARK) || from > head || head - from > LOG_RECORDS {
            return None;
        }
        let mut out = Changes::default();
        for pos in from..head {
            let rec = self.log_word(pos, 1).load(Ordering::Relaxed);
            let op = (rec >> 32) & 0xff;
            match op {
                LOG_INSERT | LOG_REMOVE => out.indices.push(rec as u32),
                LOG_RANGE => out.ranges.push((rec as u32, (rec >> 40) as u32)),
                _ => return None,
            }
        }
        out.indices.sort_unstable();
        out.indices.dedup();
        out.ranges.sort_unstable();
        out.ranges.dedup();
        Some(out)
    }

    fn range_word(&self, record: usize, k: usize) -> &AtomicU64 {
        self.word(self.geo.ranges_off / 8 + record * (RANGE_RECORD_BYTES / 8) + k)
    }

    /// The live range records, by record number (a record reaching past the high-water mark
    /// is none).
    pub fn ranges(&self) -> Vec<SharedRange> {
        (0..RANGE_RECORDS)
            .filter_map(|record| self.range(record))
            .collect()
    }

    fn range(&self, record: usize) -> Option<SharedRange> {
        if record >= RANGE_RECORDS || self.range_word(record, 0).load(Ordering::Acquire) != 1 {
            return None;
        }
        let w = |k| self.range_word(record, k).load(Ordering::Relaxed);
        let mut base = [0u8; SLOT_BYTES];
        for (k, chunk) in base.chunks_exact_mut(8).enumerate() {
            chunk.copy_from_slice(&w(3 + k).to_le_bytes());
        }
        let (span, set) = (w(1), w(2));
        let r = SharedRange {
            record,
            first: span as u32,
            count: (span >> 32) as u32,
            svc: set as u32,
            offset: (set >> 32) as u32,
            base,
        };
        // Below the high-water mark, where every index is reconciled with its slot: members
        // past it were never taken, and a record naming them (no process writes one) would
        // place indices in a mirror that no catch-up looks at again.
        let end = u64::from(r.first) + u64::from(r.count);
        (end <= u64::from(self.high_water()) && r.count >= 2).then_some(r)
    }

    /// Free every range record (a repair: the slots alone are trusted).
    fn clear_ranges(&self) {
        for record in 0..RANGE_RECORDS {
            self.range_word(record, 0).store(0, Ordering::Release);
        }
    }

    fn log_word(&self, pos: u64, k: usize) -> &AtomicU64 {
        let rec = (pos % LOG_RECORDS) as usize;
        self.word(self.geo.log_off / 8 + rec * (LOG_RECORD_BYTES / 8) + k)
    }

    fn append_log(&self, op: u64, index: u32) {
        self.append_log_record(u64::from(index) | op << 32);
    }

    fn append_log_record(&self, record: u64) {
        let head = self.log_head();
        // Counters wrap rather than trust that no process wrote garbage into them.
        let generation = self.hdr(hw::GENERATION).wrapping_add(1);
        self.log_word(head, 0).store(generation, Ordering::Relaxed);
        self.log_word(head, 1).store(record, Ordering::Relaxed);
        self.set_word(hw::LOG_HEAD, head.wrapping_add(1));
    }
}

/// The segment, locked. Changes need the lock exclusive: they set the writer word first
/// ([`Locked::begin`]) and end with [`Locked::commit`] (or [`Locked::end`] when nothing
/// changed). Dropping the lock in the middle of a change leaves the writer word set, as a
/// crash would, and the next process repairs the segment.
pub struct Locked<'a> {
    seg: &'a Segment,
    exclusive: bool,
}

impl core::ops::Deref for Locked<'_> {
    type Target = Segment;
    fn deref(&self) -> &Segment {
        self.seg
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.seg.unlock_file();
    }
}

impl Locked<'_> {
    fn check_exclusive(&self) -> bool {
        debug_assert!(
            self.exclusive,
            "a change to a named AV needs the exclusive lock"
        );
        self.exclusive
    }

    /// Start a change: mark the segment as being written by this process.
    pub fn begin(&self) {
        if self.check_exclusive() {
            self.seg
                .set_word(hw::WRITER, u64::from(std::process::id()).max(1));
        }
    }

    /// End a change that changed nothing.
    pub fn end(&self) {
        if self.check_exclusive() {
            self.seg.set_word(hw::WRITER, 0);
        }
    }

    /// Commit a change: bump the generation and clear the writer word. Returns the new
    /// generation.
    pub fn commit(&self) -> u64 {
        if !self.check_exclusive() {
            return self.seg.generation();
        }
        let g = self
            .seg
            .word(hw::GENERATION)
            .fetch_add(1, Ordering::Release)
            .wrapping_add(1);
        self.seg.set_word(hw::WRITER, 0);
        g
    }

    /// Take the lowest unused index (its bit set, its slot's memory backed; the slot is
    /// written by [`Locked::store`]). `FI_ENOSPC` when every index is in use, or when
    /// `/dev/shm` has no memory left for the slot.
    pub fn alloc(&self) -> Result<u32, FiError> {
        let seg = self.seg;
        let full = || {
            FiError::new(
                FiErrno::FI_ENOSPC,
                format!("all {} AV entries are in use", seg.geo.capacity),
            )
        };
        if !self.check_exclusive() {
            return Err(FiError::io(
                "the named AV's segment is not locked for a change",
            ));
        }
        let words = seg.geo.capacity.div_ceil(64) as usize;
        // The lowest clear bit below the capacity in bitmap words `from..to`.
        let find = |from: usize, to: usize| {
            (from..to).find_map(|w| {
                let bits = seg.word(seg.geo.bitmap_off / 8 + w).load(Ordering::Relaxed);
                let index = (w * 64) as u64 + u64::from((!bits).trailing_zeros());
                (bits != u64::MAX && index < u64::from(seg.geo.capacity))
                    .then_some((w, index as u32))
            })
        };
        // Every word below the hint is full, unless another process wrote garbage there: then
        // the words below it are searched too, so a bad hint costs time, never a false FI_ENOSPC.
        let hint = usize::try_from(seg.hdr(hw::FREE_HINT)).map_or(words, |h| h.min(words));
        let Some((w, index)) = find(hint, words).or_else(|| find(0, hint)) else {
            seg.set_word(hw::FREE_HINT, words as u64);
            return Err(full());
        };
        let slot_end = seg.geo.slots_off + (index as usize + 1) * SLOT_BYTES;
        seg.reserve(slot_end).map_err(|e| {
            os_error(
                &format!(
                    "backing the slot of index {index} in {}",
                    seg.path.display()
                ),
                &e,
            )
        })?;
        seg.set_bit(index, true);
        seg.set_word(hw::FREE_HINT, w as u64);
        seg.set_word(hw::LIVE, seg.hdr(hw::LIVE).saturating_add(1));
        if u64::from(index) >= seg.hdr(hw::HIGH_WATER) {
            seg.set_word(hw::HIGH_WATER, u64::from(index) + 1);
        }
        Ok(index)
    }

    /// Give back an index taken by [`Locked::alloc`], or remove one in use: clear its slot,
    /// then its bit.
    pub fn free(&self, index: u32) {
        if !self.check_exclusive() || !self.seg.bit(index) {
            return;
        }
        let seg = self.seg;
        seg.clear_slot(index);
        seg.set_bit(index, false);
        seg.set_word(hw::LIVE, seg.hdr(hw::LIVE).saturating_sub(1));
        let w = u64::from(index / 64);
        if w < seg.hdr(hw::FREE_HINT) {
            seg.set_word(hw::FREE_HINT, w);
        }
    }

    /// Write the address of an index taken by [`Locked::alloc`]: the last three words, then
    /// the first.
    pub fn store(&self, index: u32, bytes: &[u8; SLOT_BYTES]) {
        if !self.check_exclusive() || index >= self.seg.geo.capacity {
            return;
        }
        let mut words = [0u64; SLOT_BYTES / 8];
        for (w, c) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            *w = c.try_into().map_or(0, u64::from_le_bytes);
        }
        for (k, &w) in words.iter().enumerate().rev() {
            self.seg.slot_word(index, k).store(w, Ordering::Relaxed);
        }
    }

    /// Record a range of `count` members at `first..first + count` (their slots are written
    /// with [`Locked::store`] as for single inserts), member 0 `base`, `svc` services per node,
    /// member `offset` at `first`. `false` when the table has no free record: the members
    /// then stand as single inserts.
    ///
    /// A live record spanning any of `first..first + count` is freed first. The caller's
    /// mirror holds the new range there, which a mirror refuses within the span of a range it
    /// holds, so it holds no such record as a range: the record outlived its members (a
    /// process that held them one by one removed them without counting them down), or the
    /// caller holds what is left of it one by one. Left, it would overlap the new record, and
    /// a process opening later would place whichever it read first as its range and hold the
    /// other's members one by one; freed, the new set is a range in every process, and the
    /// old record's members outside the new span, if any remain, are single entries in
    /// processes that open later (what they hold is the same; only its form differs).
    pub fn add_range(
        &self,
        first: u32,
        count: u32,
        svc: u32,
        offset: u32,
        base: &[u8; SLOT_BYTES],
    ) -> bool {
        if !self.check_exclusive() {
            return false;
        }
        let seg = self.seg;
        let end = u64::from(first) + u64::from(count);
        for stale in seg.ranges() {
            if u64::from(stale.first) < end
                && u64::from(stale.first) + u64::from(stale.count) > u64::from(first)
            {
                seg.range_word(stale.record, 0).store(0, Ordering::Release);
            }
        }
        let Some(record) =
            (0..RANGE_RECORDS).find(|&r| seg.range_word(r, 0).load(Ordering::Relaxed) == 0)
        else {
            return false;
        };
        let put = |k: usize, v: u64| seg.range_word(record, k).store(v, Ordering::Relaxed);
        put(1, u64::from(first) | u64::from(count) << 32);
        put(2, u64::from(svc) | u64::from(offset) << 32);
        for (k, c) in base.chunks_exact(8).enumerate() {
            put(3 + k, c.try_into().map_or(0, u64::from_le_bytes));
        }
        put(7, u64::from(count));
        // Published last: a reader sees a whole record or none.
        seg.range_word(record, 0).store(1, Ordering::Release);
        true
    }

    /// Members at `indices` were removed: each live range covering one counts one fewer, and a
    /// range goes with its last member.
    pub fn range_members_removed(&self, indices: &[u32]) {
        if !self.check_exclusive() {
            return;
        }
        let seg = self.seg;
        for r in seg.ranges() {
            let end = u64::from(r.first) + u64::from(r.count);
            let gone = indices
                .iter()
                .filter(|&&i| i >= r.first && u64::from(i) < end)
                .count() as u64;
            if gone == 0 {
                continue;
            }
            let live = seg.range_word(r.record, 7).load(Ordering::Relaxed);
            let left = live.saturating_sub(gone);
            seg.range_word(r.record, 7).store(left, Ordering::Relaxed);
            if left == 0 {
                seg.range_word(r.record, 0).store(0, Ordering::Release);
            }
        }
    }

    /// Append a record to the change log.
    pub fn log(&self, op: u64, index: u32) {
        if self.check_exclusive() {
            self.seg.append_log(op, index);
        }
    }

    /// Append a [`LOG_RANGE`] record of the range of `count` members at `first`.
    pub fn log_range(&self, first: u32, count: u32) {
        let count = if count <= LOG_RANGE_MAX_COUNT {
            count
        } else {
            0
        };
        if self.check_exclusive() {
            self.seg
                .append_log_record(u64::from(first) | LOG_RANGE << 32 | u64::from(count) << 40);
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // A process forked from the opener holds the opener's presence, not one of its own:
        // the handle stays the opener's, and the file is merely closed here.
        if !self.attached || std::process::id() != self.opener {
            return;
        }
        if let Err(e) = ofd_lock(&self.file, libc::F_WRLCK, LOCK_BYTE, Wait::Yes) {
            warn!(path = %self.path.display(), error = %e,
                "named AV close: taking the segment lock failed; not detaching");
            return;
        }
        self.detach_locked();
        self.unlock_file();
    }
}

impl Segment {
    /// Drop this handle's reference and presence; the last handle marks the segment closed
    /// and unlinks it.
    fn detach_locked(&mut self) {
        self.set_word(hw::REFCOUNT, self.hdr(hw::REFCOUNT).saturating_sub(1));
        self.attached = false;
        let released = ofd_lock(&self.file, libc::F_UNLCK, PRESENCE_BYTE, Wait::Yes);
        let last = released.is_ok()
            && matches!(
                ofd_lock(&self.file, libc::F_WRLCK, PRESENCE_BYTE, Wait::No),
                Ok(true)
            );
        if !last {
            return;
        }
        self.set_word(hw::STATE, STATE_CLOSED);
        self.set_word(hw::REFCOUNT, 0);
        let ours = match (std::fs::metadata(&self.path), self.file.metadata()) {
            (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
            _ => false,
        };
        if ours {
            match std::fs::remove_file(&self.path) {
                Ok(()) => {
                    debug!(path = %self.path.display(), "named AV segment unlinked by its last handle")
                }
                Err(e) => warn!(path = %self.path.display(), error = %e,
                    "unlinking the named AV segment failed"),
            }
        }
        if let Err(e) = ofd_lock(&self.file, libc::F_UNLCK, PRESENCE_BYTE, Wait::Yes) {
            debug!(error = %e, "releasing the presence probe failed");
        }
    }
}

/// How long [`Snapshot::read`] waits for a change in progress to end before giving up.
pub const SNAPSHOT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// What a named AV holds, read from outside the processes that share it (`uetctl av dump`
/// of a live process compares it with the process's NIC table).
///
/// Read without attaching: the segment is mapped read-only, the reader holds no presence and
/// is not counted among the handles, so it neither keeps the AV alive nor changes when it goes.
/// The slots are copied under the shared lock, the one catch-ups take, so the copy is one
/// generation of the AV: no change is half in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The AV name.
    pub name: String,
    /// The segment's file.
    pub path: PathBuf,
    /// Table entries.
    pub capacity: u32,
    /// `rx_ctx_bits` the AV was created with.
    pub rx_ctx_bits: u64,
    /// JobID the AV was created with: every entry's.
    pub job_id: u64,
    /// Largest peer group id (0: no peer groups).
    pub max_group_id: u64,
    /// The generation the copy is of.
    pub generation: u64,
    /// Handles attached (a process that died is counted until the next open or close).
    pub handles: u64,
    /// Process id of the AV's creator.
    pub creator: u64,
    /// One past the highest index ever used.
    pub high_water: u32,
    /// The process id of a writer that died in the middle of a change: the segment waits for
    /// the next process that opens or changes the AV to repair it, and `entries` may hold
    /// part of that change. `None` when the segment is consistent.
    pub interrupted_writer: Option<u64>,
    /// The indices in use and their addresses, ascending.
    pub entries: Vec<(u32, [u8; SLOT_BYTES])>,
    /// The symmetric ranges recorded, by record number.
    pub ranges: Vec<SharedRange>,
}

impl Snapshot {
    /// Read the named AV `name`. `FI_ENOENT` when no AV of that name exists (or its last
    /// handle has closed it); `FI_EACCES` when the segment's permissions refuse this user or
    /// its path is a symbolic link; `FI_EINVAL` when the file is not a segment of this layout
    /// holding that name (a FIFO, device, directory or socket in its place included);
    /// `FI_EAGAIN` when a change holds the lock for longer than [`SNAPSHOT_WAIT`].
    pub fn read(name: &str) -> Result<Snapshot, FiError> {
        let ctx = |what: &str| format!("named AV '{name}': {what}");
        check_name(name)?;
        let path = path_of(name);
        let gone = || {
            FiError::new(
                FiErrno::FI_ENOENT,
                format!("no named AV '{name}' exists (no {})", path.display()),
            )
        };
        // Not through a symbolic link, and without waiting: a FIFO in the segment's place
        // (`/dev/shm` is writable by all) would block an open until someone writes to it.
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(gone()),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(FiError::new(
                    FiErrno::FI_EACCES,
                    ctx(&format!(
                        "{} is a symbolic link, not a segment file",
                        path.display()
                    )),
                ))
            }
            Err(e) => return Err(open_error(&ctx("reading"), &path, &e)),
        };
        let deadline = std::time::Instant::now() + SNAPSHOT_WAIT;
        loop {
            let got = ofd_lock(&file, libc::F_RDLCK, LOCK_BYTE, Wait::No)
                .map_err(|e| os_error(&ctx("taking the segment lock"), &e))?;
            if got {
                break;
            }
            if std::time::Instant::now() >= deadline {
                return Err(FiError::new(
                    FiErrno::FI_EAGAIN,
                    format!(
                        "named AV '{name}': a change held the segment for more than {} s; \
                         try again",
                        SNAPSHOT_WAIT.as_secs()
                    ),
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Under the shared lock no change is in progress: the copy is one generation. The
        // lock goes with `file`, on every path from here.
        let read_error = |e: io::Error| match e.kind() {
            io::ErrorKind::InvalidData => {
                FiError::inval(format!("{} is not a named-AV segment: {e}", path.display()))
            }
            io::ErrorKind::OutOfMemory => FiError::new(FiErrno::FI_ENOMEM, ctx(&e.to_string())),
            _ => os_error(&ctx("reading the segment"), &e),
        };
        let size = segment_size(&file).map_err(read_error)?;
        // The header first: a file that is no segment of this layout (whatever its size) is
        // refused having read just that.
        let header = copy_words(&file, HEADER_BYTES).map_err(read_error)?;
        // Never attached: dropping it detaches nothing.
        let mut seg = Segment::unchecked(Words::Copied(header), file, &path, size);
        seg.geo = seg.check_header(name, size).map_err(|e| match e {
            Attach::Failed(e) => e,
            Attach::Gone => gone(),
        })?;
        if seg.hdr(hw::STATE) != STATE_LIVE {
            return Err(gone());
        }
        // Then what may be in use: everything before the slots, and the slots a rescan looks
        // at (words past the copy read as 0, as never-used slots are).
        let high_water = seg.high_water();
        seg.map = Words::Copied(copy_words(&seg.file, seg.geo.slots_off).map_err(read_error)?);
        let end = seg.scan_end();
        let used = seg.geo.slots_off + end as usize * SLOT_BYTES;
        seg.map = Words::Copied(copy_words(&seg.file, used.min(size)).map_err(read_error)?);
        let entries = (0..end)
            .filter_map(|i| seg.slot(i).map(|s| (i, s)))
            .collect();
        let writer = seg.hdr(hw::WRITER);
        Ok(Snapshot {
            name: name.to_string(),
            path,
            capacity: seg.geo.capacity,
            rx_ctx_bits: seg.rx_ctx_bits(),
            job_id: seg.job_id(),
            max_group_id: seg.max_group_id(),
            generation: seg.generation(),
            handles: seg.refcount(),
            creator: seg.hdr(hw::CREATOR),
            high_water,
            interrupted_writer: (writer != 0).then_some(writer),
            entries,
            ranges: seg.ranges(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A temporary name another creator left (same process id, another PID namespace, or
    /// one that died) is passed over; the file made is new, mode 0600, and empty.
    #[test]
    fn a_temporary_name_already_taken_is_passed_over() {
        let dir = std::env::temp_dir().join(format!("uet-named-temp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Every name the next calls could pick first, for this counter value, taken.
        let next = TMP_COUNTER.load(Ordering::Relaxed);
        let prefix = format!(".{SHM_PREFIX}tmp.{}.{next}.", std::process::id());
        let (a, a_path) = named_temp(&dir).unwrap();
        std::fs::remove_file(&a_path).unwrap();
        let stale = dir.join(a_path.file_name().unwrap());
        std::fs::write(&stale, b"left behind").unwrap();
        assert!(a_path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(&prefix));
        drop(a);
        let (b, b_path) = named_temp(&dir).unwrap();
        assert_ne!(b_path, stale);
        assert_eq!(b.metadata().unwrap().len(), 0);
        assert_eq!(b.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::read(&stale).unwrap(),
            b"left behind",
            "not touched"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Where the system has `O_TMPFILE` (tmpfs since Linux 3.11) and procfs, a new segment
    /// file has no name until it is published, so a creator that dies leaves nothing; a
    /// second publish of the same name is `AlreadyExists`.
    #[test]
    fn a_new_segment_file_is_unnamed_until_published_or_named_where_it_must_be() {
        use std::os::unix::fs::MetadataExt;
        let (file, tmp) = new_segment_file(true).unwrap();
        assert_eq!(tmp, None, "O_TMPFILE in {SHM_DIR}");
        assert_eq!(file.metadata().unwrap().nlink(), 0);
        let path =
            Path::new(SHM_DIR).join(format!("{SHM_PREFIX}test-unnamed-{}", std::process::id()));
        publish(&file, None, &path).unwrap();
        assert_eq!(file.metadata().unwrap().nlink(), 1);
        assert_eq!(
            std::fs::metadata(&path).unwrap().ino(),
            file.metadata().unwrap().ino()
        );
        let (other, _) = new_segment_file(true).unwrap();
        let e = publish(&other, None, &path).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        std::fs::remove_file(&path).unwrap();
        // The fallback where an unnamed file cannot be published: a named temporary, linked.
        let (named, tmp) = new_segment_file(false).unwrap();
        let tmp = tmp.expect("a temporary name");
        assert!(tmp.starts_with(SHM_DIR));
        publish(&named, Some(&tmp), &path).unwrap();
        assert_eq!(named.metadata().unwrap().nlink(), 2);
        std::fs::remove_file(&tmp).unwrap();
        std::fs::remove_file(&path).unwrap();
    }

    /// A creator whose umask takes the owner's write bit still makes a segment of mode 0600,
    /// which the AV's next process can open for writing.
    #[test]
    fn a_new_segment_file_is_mode_0600_whatever_the_umask() {
        // SAFETY: umask has no preconditions; restored below.
        let old = unsafe { libc::umask(0o277) };
        let made = [true, false].map(new_segment_file);
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        for (unnamed, made) in [true, false].into_iter().zip(made) {
            let (file, tmp) = made.unwrap();
            let mode = file.metadata().unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "unnamed {unnamed}");
            if let Some(tmp) = tmp {
                std::fs::remove_file(tmp).unwrap();
            }
        }
    }

    #[test]
    fn file_names_are_safe_and_bounded() {
        assert_eq!(file_name("job-42.av_1"), "uet-av.job-42.av_1");
        assert_eq!(file_name("/a b%"), "uet-av.%2Fa%20b%25");
        let long = "é".repeat(120);
        let f = file_name(&long);
        assert_eq!(f.len(), NAME_MAX);
        assert!(f.starts_with("uet-av.%C3%A9"));
        assert_ne!(
            f,
            file_name(&"é".repeat(121)),
            "the hash tells long names apart"
        );
    }

    #[test]
    fn open_refuses_a_name_the_header_cannot_hold() {
        let params = SegmentParams {
            capacity: 8,
            rx_ctx_bits: 0,
            job_id: 1,
            max_group_id: 0,
        };
        for name in [String::new(), "x".repeat(NAME_MAX + 1), "a\0b".into()] {
            let e = Segment::open(&name, true, params).unwrap_err();
            assert_eq!(e.errno, FiErrno::FI_EINVAL, "{e}");
        }
    }

    #[test]
    fn geometry_aligns_every_part() {
        let g = Geometry::new(100).unwrap();
        assert_eq!(g.bitmap_off, 512);
        assert_eq!(g.log_off % 64, 0);
        assert_eq!(g.ranges_off, g.log_off + 4096 * 16);
        assert_eq!(g.slots_off, g.ranges_off + 64 * 64);
        assert_eq!(g.size, g.slots_off + 100 * 32);
        let g = Geometry::new(u32::MAX).unwrap();
        assert!(g.size > 128 << 30);
    }
}
