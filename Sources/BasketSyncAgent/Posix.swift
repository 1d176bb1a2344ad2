import BasketSyncWire
import Glibc

/// A failed system call: what was attempted, on which path, and errno.
public struct SystemError: Error, CustomStringConvertible, Equatable {
    /// What was being done, such as "open" or "fsync".
    public var operation: String
    /// The file concerned.
    public var path: String
    /// The errno value.
    public var code: Int32

    /// A sentence naming the file, the failure and what to do.
    public var description: String {
        "\(path): \(operation) failed: \(String(cString: strerror(code)))\(SystemError.advice(code))"
    }

    /// Whether retrying later may succeed (disk full, busy, interrupted I/O).
    public var isTemporary: Bool { [ENOSPC, EDQUOT, EAGAIN, EBUSY, EIO, EINTR, ENOMEM, EMFILE, ENFILE].contains(code) }

    static func advice(_ code: Int32) -> String {
        switch code {
        case ENOSPC, EDQUOT: return "; free some disk space, nothing was acknowledged that is not on disk"
        case EACCES, EPERM: return "; check the owner and the permissions of the file and its directory (basket-sync runs as uid \(getuid()))"
        case EROFS: return "; the file system is read-only, remount it read-write"
        case ENOENT: return "; check that the path exists"
        default: return ""
        }
    }
}

/// The thin layer over the C calls: errno is read at once, EINTR retried, failures typed.
enum Posix {
    static func check(_ result: Int32, _ operation: String, _ path: String) throws(SystemError) -> Int32 {
        if result < 0 { throw SystemError(operation: operation, path: path, code: errno) }
        return result
    }

    static func retrying(_ body: () -> Int32) -> Int32 {
        while true {
            let result = body()
            if result >= 0 || errno != EINTR { return result }
        }
    }

    /// Files the host or the Mealz side read: owner and group, minus the umask.
    static let sharedFileMode: mode_t = 0o640

    static func open(_ path: String, _ flags: Int32, mode: mode_t = sharedFileMode) throws(SystemError) -> Int32 {
        try check(retrying { Glibc.open(path, flags | O_CLOEXEC, mode) }, "open", path)
    }

    static func close(_ fd: Int32) { _ = Glibc.close(fd) }

    /// Writes all of `bytes` at the current offset.
    static func writeAll(_ fd: Int32, _ bytes: [UInt8], path: String) throws(SystemError) {
        let failure: Int32 = bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    return errno
                }
                offset += written
            }
            return 0
        }
        if failure != 0 { throw SystemError(operation: "write", path: path, code: failure) }
    }

    static func fsync(_ fd: Int32, path: String) throws(SystemError) {
        _ = try check(retrying { Glibc.fsync(fd) }, "fsync", path)
    }

    /// fsyncs a directory, so that a rename or a creation inside it is durable.
    static func fsyncDirectory(_ path: String) throws(SystemError) {
        let fd = try open(path, O_RDONLY | O_DIRECTORY)
        defer { close(fd) }
        try fsync(fd, path: path)
    }

    static func rename(_ from: String, _ to: String) throws(SystemError) {
        _ = try check(Glibc.rename(from, to), "rename to \(to)", from)
    }

    /// Reads the whole file, refusing one larger than `limit` bytes. Nil when it does not exist.
    static func readFile(_ path: String, limit: Int) throws(AgentError) -> [UInt8]? {
        let fd: Int32
        do { fd = try open(path, O_RDONLY) } catch {
            if error.code == ENOENT { return nil }
            throw .system(error)
        }
        defer { close(fd) }
        var info = stat()
        let expected = fstat(fd, &info) == 0 ? Int(info.st_size) : 0
        if expected > limit { throw .tooLarge(path: path, size: expected, limit: limit) }
        // Read straight into the array, sized from fstat (one more byte tells if it grew since).
        var bytes: [UInt8] = []
        var capacity = max(expected + 1, 4096)
        while true {
            var failure: Int32 = 0
            let start = bytes.count
            bytes = Array(unsafeUninitializedCapacity: capacity) { buffer, count in
                if start > 0 { bytes.withUnsafeBytes { buffer.baseAddress!.update(from: $0.bindMemory(to: UInt8.self).baseAddress!, count: start) } }
                count = start
                while count < capacity {
                    let got = Glibc.read(fd, buffer.baseAddress! + count, capacity - count)
                    if got < 0 {
                        if errno == EINTR { continue }
                        failure = errno
                        return
                    }
                    if got == 0 { return }
                    count += got
                }
            }
            if failure != 0 { throw .system(SystemError(operation: "read", path: path, code: failure)) }
            if bytes.count > limit { throw .tooLarge(path: path, size: bytes.count, limit: limit) }
            if bytes.count < capacity { return bytes }
            capacity *= 2
        }
    }

    /// Writes a whole file the durable way: a temp file beside it, fsync, rename, fsync of the
    /// directory. A reader sees the old content or the new, never a part.
    /// A file that exists keeps its mode; a new one gets `mode` minus the umask.
    static func writeFileAtomically(_ path: String, _ bytes: [UInt8], mode: mode_t = sharedFileMode) throws(SystemError) {
        var existing = Glibc.stat()
        let kept: mode_t? = lstat(path, &existing) == 0 ? existing.st_mode & 0o7777 : nil
        let directory = dirname(of: path)
        let temporary = "\(directory)/.\(basename(of: path)).\(getpid()).tmp"
        let fd = try open(temporary, O_WRONLY | O_CREAT | O_TRUNC, mode: kept ?? mode)
        if let kept { _ = fchmod(fd, kept) }
        do {
            try writeAll(fd, bytes, path: temporary)
            try fsync(fd, path: temporary)
        } catch {
            close(fd)
            _ = unlink(temporary)
            throw error
        }
        close(fd)
        do { try rename(temporary, path) } catch {
            _ = unlink(temporary)
            throw error
        }
        try fsyncDirectory(directory)
    }

    static func makeDirectory(_ path: String, mode: mode_t) throws(SystemError) {
        if mkdir(path, mode) != 0, errno != EEXIST {
            throw SystemError(operation: "mkdir", path: path, code: errno)
        }
    }

    static func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }

    static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    /// The names in a directory, sorted; empty when it cannot be read.
    static func listDirectory(_ path: String) -> [String] {
        guard let directory = opendir(path) else { return [] }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafePointer(to: entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    static func dirname(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    static func basename(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }
}

extension Posix {
    /// `mkdir -p`: creates the directory and its missing parents (0755).
    static func makeDirectoryTree(_ path: String) throws(AgentError) {
        var current = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            current += "/\(component)"
            do { try makeDirectory(current, mode: 0o755) } catch { throw .system(error) }
        }
    }
}
