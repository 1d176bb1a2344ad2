import Glibc
import CMalloc

/// How a file is opened: the `open(2)` flags the agent uses, without libc in the callers.
package struct OpenOptions: OptionSet {
    package let rawValue: Int32
    package init(rawValue: Int32) { self.rawValue = rawValue }

    package static let readOnly = OpenOptions([])
    package static let writeOnly = OpenOptions(rawValue: O_WRONLY)
    package static let readWrite = OpenOptions(rawValue: O_RDWR)
    package static let create = OpenOptions(rawValue: O_CREAT)
    package static let exclusive = OpenOptions(rawValue: O_EXCL)
    package static let append = OpenOptions(rawValue: O_APPEND)
    package static let directory = OpenOptions(rawValue: O_DIRECTORY)
    package static let truncate = OpenOptions(rawValue: O_TRUNC)
}

/// Which version of a file: the file (device, inode), its size, and its modification and change
/// times in nanoseconds. Two looks with the same identity saw the same file unchanged, as far as
/// `stat` can tell. The one notion of a file's version: the cart version a pass read, the cart on
/// disk when a batch was made, a polled file, the database's own files.
package struct FileIdentity: Hashable, Sendable {
    package var device: UInt64
    package var inode: UInt64
    package var size: Int64
    package var modified: Int64
    package var changed: Int64

    /// Whether the file system keeps this file's times in whole seconds (both without
    /// nanoseconds) and it changed within the last two seconds of `nowNanoseconds`: a write in
    /// place of the same size could still come in the same second and look the same.
    package func mayChangeUnseen(nowNanoseconds: Int64) -> Bool {
        modified % 1_000_000_000 == 0 && changed % 1_000_000_000 == 0 && Posix.nanoseconds(from: changed, to: nowNanoseconds) < 2_000_000_000
    }

    /// Whether `other` is the same file (device and inode), whatever it holds now.
    package func isSameFile(as other: FileIdentity?) -> Bool {
        guard let other else { return false }
        return device == other.device && inode == other.inode
    }

    /// The five numbers it is kept as in the database (device and inode as their bit patterns).
    package var numbers: [Int64] { [Int64(bitPattern: device), Int64(bitPattern: inode), size, modified, changed] }

    /// An identity from the five numbers it was kept as; nil when they are not five.
    package init?(numbers: some Collection<Int64>) {
        let numbers = Array(numbers)
        guard numbers.count == 5 else { return nil }
        self.init(device: UInt64(bitPattern: numbers[0]), inode: UInt64(bitPattern: numbers[1]), size: numbers[2], modified: numbers[3], changed: numbers[4])
    }

    package init(device: UInt64, inode: UInt64, size: Int64, modified: Int64, changed: Int64) {
        (self.device, self.inode, self.size, self.modified, self.changed) = (device, inode, size, modified, changed)
    }
}

/// What `stat` says of a file, as far as the agent cares.
package struct FileInfo: Equatable {
    /// What kind of file it is.
    package enum Kind: Equatable {
        case regular, directory, symbolicLink, fifo, device, socket, other

        /// How an error names it.
        var name: String {
            switch self {
            case .regular: return "a regular file"
            case .directory: return "a directory"
            case .symbolicLink: return "a symbolic link"
            case .fifo: return "a FIFO"
            case .device: return "a device"
            case .socket: return "a socket"
            case .other: return "a special file"
            }
        }
    }

    package var kind: Kind
    package var size: Int64
    package var inode: UInt64
    /// The permission bits.
    package var mode: UInt32
    package var device: UInt64
    /// Last change of the content, and of the inode (a rename, a chmod), in nanoseconds.
    package var modified: Int64
    package var changed: Int64
    /// How many names the file has (hard links).
    package var links: UInt64
    /// Its owner and group.
    package var owner: UInt32
    package var group: UInt32

    /// What tells one version of a file from another: a rewrite, a rename over it or a touch
    /// changes it.
    package var identity: FileIdentity { FileIdentity(device: device, inode: inode, size: size, modified: modified, changed: changed) }

    package init(_ info: stat) {
        // The kinds' bits as POSIX gives them (Glibc's S_IF* are calls, not constants, here:
        // ten thousand polled carts make this a few times a second each).
        switch info.st_mode & 0o170000 {
        case 0o100000: kind = .regular
        case 0o040000: kind = .directory
        case 0o120000: kind = .symbolicLink
        case 0o010000: kind = .fifo
        case 0o020000, 0o060000: kind = .device
        case 0o140000: kind = .socket
        default: kind = .other
        }
        size = Int64(info.st_size)
        links = UInt64(info.st_nlink)
        owner = UInt32(info.st_uid)
        group = UInt32(info.st_gid)
        inode = UInt64(info.st_ino)
        mode = UInt32(info.st_mode & 0o7777)
        device = UInt64(info.st_dev)
        modified = Posix.nanoseconds(info.st_mtim)
        changed = Posix.nanoseconds(info.st_ctim)
    }
}

/// Every libc call of the agent, one small wrapper each: errno is read at once, EINTR retried,
/// partial reads and writes completed, failures typed as ``SystemError``. Nothing outside
/// `System/` imports Glibc.
package enum Posix {
    /// Runs a call again while it fails with EINTR.
    package static func retrying<T: SignedInteger>(_ body: () -> T) -> T {
        while true {
            let result = body()
            if result >= 0 || errno != EINTR { return result }
        }
    }

    /// Files the host or the Mealz side read: owner and group, minus the umask.
    package static let sharedFileMode: UInt32 = 0o640

    // MARK: Descriptors

    /// Opens a file under the open policy of docs/spec.md §7: without following a symbolic link (unless
    /// `follow`), without blocking (a FIFO never hangs the process), then checked with `fstat`:
    /// only a regular file (a directory with `.directory`) is returned, anything else is closed
    /// and refused with an error that says what it is.
    package static func open(_ path: String, _ options: OpenOptions, mode: UInt32 = sharedFileMode, follow: Bool = false) throws(SystemError) -> Int32 {
        try openWithInfo(path, options, mode: mode, follow: follow).fd
    }

    /// ``open(_:_:mode:follow:)``, and what the descriptor opened is (its `fstat`, which the
    /// check of its kind read).
    package static func openWithInfo(_ path: String, _ options: OpenOptions, mode: UInt32 = sharedFileMode, follow: Bool = false) throws(SystemError) -> (fd: Int32, info: FileInfo) {
        let flags = options.rawValue | O_CLOEXEC | O_NONBLOCK | (follow ? 0 : O_NOFOLLOW)
        let (at, relative) = reached(path)
        let fd = retrying { Glibc.openat(at, relative, flags, mode_t(mode)) }
        if fd < 0 {
            if errno == ELOOP, !follow { throw SystemError(path: path, shape: FileInfo.Kind.symbolicLink.name, expectsDirectory: options.contains(.directory)) }
            if errno == ENXIO { throw SystemError(path: path, shape: FileInfo.Kind.fifo.name + " or a socket") }
            if errno == EISDIR { throw SystemError(path: path, shape: FileInfo.Kind.directory.name) }
            throw .last("open", path)
        }
        let expected: FileInfo.Kind = options.contains(.directory) ? .directory : .regular
        let info: FileInfo
        do { info = try fileInfo(fd, path: path) } catch {
            close(fd)
            throw error
        }
        guard info.kind == expected else {
            close(fd)
            throw SystemError(path: path, shape: info.kind.name, expectsDirectory: expected == .directory)
        }
        return (fd, info)
    }

    package static func close(_ fd: Int32) { _ = Glibc.close(fd) }

    /// Raises the soft limit of open descriptors to the hard one (an agent over many carts keeps
    /// a few files open per cart it serves); returns the limit now in force.
    @discardableResult
    package static func raiseDescriptorLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        return limit.rlim_cur > rlim_t(Int.max) ? Int.max : Int(limit.rlim_cur)
    }

    /// Sets `O_NONBLOCK` on a descriptor.
    package static func setNonBlocking(_ fd: Int32) { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }

    /// One `read` into `buffer`, retried on EINTR: the count read, 0 at the end, nil when a
    /// non-blocking descriptor has nothing now.
    package static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, path: String) throws(SystemError) -> Int? {
        let count = retrying { Glibc.read(fd, buffer.baseAddress, buffer.count) }
        if count < 0 {
            if errno == EAGAIN { return nil }
            throw .last("read", path)
        }
        return count
    }

    /// Reads from the current offset to the end, refusing more than `limit` bytes; `expected`
    /// sizes the first buffer (one byte more tells whether the file grew since).
    /// Never more than one byte past the limit is read: an endless stream is refused as "more
    /// than" the limit (its size is known only when its end was reached).
    package static func readToEnd(_ fd: Int32, path: String, limit: Int, expected: Int = 0) throws(AgentError) -> [UInt8] {
        var bytes: [UInt8] = []
        let most = limit == Int.max ? limit : limit + 1
        var capacity = min(max(expected + 1, 4096), most)
        var ended = false
        while true {
            var failure: SystemError?
            let start = bytes.count
            bytes = Array(unsafeUninitializedCapacity: capacity) { buffer, count in
                if start > 0 { bytes.withUnsafeBytes { buffer.baseAddress!.update(from: $0.bindMemory(to: UInt8.self).baseAddress!, count: start) } }
                count = start
                while count < capacity {
                    do throws(SystemError) {
                        let got = try read(fd, into: UnsafeMutableRawBufferPointer(rebasing: UnsafeMutableRawBufferPointer(buffer)[count...]), path: path) ?? 0
                        if got == 0 {
                            ended = true
                            return
                        }
                        count += got
                    } catch {
                        failure = error
                        return
                    }
                }
            }
            if let failure { throw .system(failure) }
            if bytes.count > limit { throw .tooLarge(path: path, size: ended ? bytes.count : -1, limit: limit) }
            if ended || bytes.count < capacity { return bytes }
            capacity = capacity > most / 2 ? most : capacity * 2
        }
    }

    /// Reads up to `count` bytes at `offset` (fewer at the end of the file).
    package static func read(_ fd: Int32, at offset: Int64, count: Int, path: String) throws(SystemError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let got = retrying { bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, count - done, off_t(offset) + off_t(done)) } }
            if got < 0 { throw .last("read", path) }
            if got == 0 { break }
            done += got
        }
        return Array(bytes[0..<done])
    }

    /// Whether the file open on `fd` holds a hole before `size` (a sparse file: bytes never
    /// written, read back as zeros): `SEEK_HOLE`, which finds none where the file system cannot
    /// tell.
    package static func hasHole(_ fd: Int32, size: Int64) -> Bool {
        let seekHole: Int32 = 4  // SEEK_HOLE (Linux), not shown by the Glibc module
        let hole = lseek(fd, 0, seekHole)
        return hole >= 0 && Int64(hole) < size
    }

    /// Writes all of `bytes` at the current offset, however many calls it takes.
    package static func writeAll(_ fd: Int32, _ bytes: [UInt8], path: String) throws(SystemError) {
        var failure: SystemError?
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = retrying { Glibc.write(fd, buffer.baseAddress! + offset, buffer.count - offset) }
                if written < 0 {
                    failure = .last("write", path)
                    return
                }
                offset += written
            }
        }
        if let failure { throw failure }
    }

    /// Writes all of `bytes` at `offset`.
    package static func writeAll(_ fd: Int32, _ bytes: [UInt8], at offset: Int64, path: String) throws(SystemError) {
        var failure: SystemError?
        bytes.withUnsafeBytes { buffer in
            var done = 0
            while done < buffer.count {
                let written = retrying { pwrite(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done)) }
                if written < 0 {
                    failure = .last("write", path)
                    return
                }
                done += written
            }
        }
        if let failure { throw failure }
    }

    package static func fsync(_ fd: Int32, path: String) throws(SystemError) {
        if retrying({ Glibc.fsync(fd) }) != 0 { throw .last("fsync", path) }
    }


    package static func setMode(_ fd: Int32, _ mode: UInt32) { _ = fchmod(fd, mode_t(mode)) }

    package static func truncate(_ fd: Int32, to size: Int64, path: String) throws(SystemError) {
        if retrying({ ftruncate(fd, off_t(size)) }) != 0 { throw .last("ftruncate", path) }
    }

    package static func fileInfo(_ fd: Int32, path: String) throws(SystemError) -> FileInfo {
        var info = stat()
        if fstat(fd, &info) != 0 { throw .last("fstat", path) }
        return FileInfo(info)
    }

    /// Takes an exclusive `flock`, waiting for it; with `wait: false`, false when another holds it.
    package static func lockExclusive(_ fd: Int32, wait: Bool = true, path: String) throws(SystemError) -> Bool {
        if retrying({ flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB)) }) == 0 { return true }
        if errno == EWOULDBLOCK { return false }
        throw .last("flock", path)
    }

    /// Takes an exclusive lock on one byte at `offset` of the file (an open-file-description lock:
    /// kept by a child that inherits the descriptor, released when the last holder closes it or
    /// dies). False when `wait` is false and another holds it.
    package static func lockByte(_ fd: Int32, at offset: Int64, wait: Bool, path: String) throws(SystemError) -> Bool {
        if byteLock(fd, type: F_WRLCK, at: offset, wait: wait) == 0 { return true }
        if errno == EAGAIN || errno == EACCES { return false }
        throw .last("lock", path)
    }

    /// `fcntl` of an open-file-description lock of `type` on the byte at `offset`.
    private static func byteLock(_ fd: Int32, type: Int32, at offset: Int64, wait: Bool) -> Int32 {
        // F_OFD_SETLK and F_OFD_SETLKW (Linux ≥ 3.15); the Glibc module does not show them.
        let command: Int32 = wait ? 38 : 37
        var lock = flock()
        lock.l_type = Int16(type)
        lock.l_whence = Int16(SEEK_SET)
        lock.l_start = off_t(offset)
        lock.l_len = 1
        lock.l_pid = 0
        return retrying { fcntl(fd, command, &lock) }
    }

    /// Opens the folder `name` inside the directory `parent` is open on, without following a link
    /// and without blocking. `path` names it in errors: one of the wrong shape (a link, a file)
    /// says what it is; a missing one is an error whose `isMissing` is true.
    package static func openFolder(named name: String, in parent: Int32, path: String) throws(SystemError) -> Int32 {
        let fd = retrying { openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK) }
        guard fd < 0 else { return fd }
        let code = errno
        if let info = info(path, follow: false), info.kind != .directory {
            throw SystemError(path: path, shape: info.kind.name, expectsDirectory: true)
        }
        throw SystemError(operation: "open", path: path, code: code)
    }

    /// Releases a `flock` (a descriptor kept open between uses holds it until then).
    package static func unlock(_ fd: Int32) { _ = retrying { flock(fd, LOCK_UN) } }

    /// Lets go the lock ``lockByte(_:at:wait:path:)`` took on the byte at `offset`.
    package static func unlockByte(_ fd: Int32, at offset: Int64) { _ = byteLock(fd, type: F_UNLCK, at: offset, wait: false) }
}
