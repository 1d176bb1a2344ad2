import Glibc

/// A failed system call: what was attempted, on which path, and errno.
public struct SystemError: Error, CustomStringConvertible, Equatable {
    /// What was being done, such as "open" or "fsync".
    public var operation: String
    /// The file concerned.
    public var path: String
    /// The errno value.
    public var code: Int32
    /// What the file is, when the call succeeded on a file of the wrong shape (a symbolic link, a
    /// FIFO, a directory, a device): basket-sync reads and writes regular files only.
    public var shape: String?
    /// Whether a directory was expected where the wrong shape was found.
    public var expectsDirectory = false
    /// Why a file of an otherwise right shape is refused, when it is not its kind.
    public var refusal: String?

    /// An error of a call, from its errno.
    public init(operation: String, path: String, code: Int32) {
        self.operation = operation
        self.path = path
        self.code = code
        shape = nil
    }

    /// A file of the wrong shape: `shape` says what it is.
    init(path: String, shape: String, expectsDirectory: Bool = false) {
        self.init(operation: "open", path: path, code: EINVAL)
        self.shape = shape
        self.expectsDirectory = expectsDirectory
    }

    /// A sentence naming the file, the failure and what to do.
    public var description: String {
        if let shapeReason { return PinnedNames.named("\(path): \(shapeReason)") }
        if operation == "watch", code == ENOSPC { return PinnedNames.named("\(path): watch failed: \(SystemError.watchLimitReached)") }
        return PinnedNames.named("\(path): \(operation) failed: \(String(cString: strerror(code)))\(SystemError.advice(code, operation: operation))")
    }

    /// What `inotify_add_watch`'s ENOSPC means: the watches of this user are all taken (a disk
    /// is not full).
    static let watchLimitReached = "the inotify watch limit is reached (other programs of this user hold the rest); raise it (sysctl fs.inotify.max_user_watches, and in /etc/sysctl.d/ to keep it)"

    /// Whether this is `inotify_add_watch` refused for want of watches.
    var isWatchLimit: Bool { operation == "watch" && code == ENOSPC }

    /// Whether retrying later may succeed (disk full, busy, interrupted I/O).
    public var isTemporary: Bool { [ENOSPC, EDQUOT, EAGAIN, EBUSY, EIO, EINTR, ENOMEM, EMFILE, ENFILE].contains(code) }

    static func advice(_ code: Int32, operation: String = "") -> String {
        switch code {
        case EAGAIN where operation == "open":
            // Opened without blocking: only a lease (or a mandatory lock) says this.
            return "; another process holds a lease on the file (fcntl F_SETLEASE) and has not let it go yet; basket-sync tries again later (the holder is in /proc/locks: LEASE)"
        case ENOSPC, EDQUOT: return "; free some disk space, nothing was acknowledged that is not on disk"
        case EACCES, EPERM: return "; check the owner and the permissions of the file and its directory (basket-sync runs as uid \(getuid()))"
        case EROFS: return "; the file system is read-only, remount it read-write"
        case ENOENT: return "; check that the path exists"
        default: return ""
        }
    }
}

extension SystemError {
    /// EACCES, for errors made without a failed call.
    static let permissionDenied = EACCES

    /// The file or directory does not exist (ENOENT).
    var isMissing: Bool { code == ENOENT }

    /// Permission denied (the file's owner and mode say no).
    var isPermissionDenied: Bool { code == EACCES || code == EPERM }


    /// The path is not a regular file (a symbolic link, a FIFO, a directory, a device, a socket).
    var isNotRegular: Bool { shape != nil }

    /// Why a file of the wrong shape is refused, without its path.
    var shapeReason: String? {
        guard let shape else { return nil }
        if let refusal { return refusal }
        if expectsDirectory {
            return "is \(shape), not a directory; basket-sync follows no symbolic link in the sync directory: make it a directory again (basket-sync init recreates missing folders)"
        }
        return "is \(shape), not a regular file; basket-sync reads and writes regular files only, and follows no symbolic link in the sync directory"
    }

    /// What `errno` says now, for a call that just failed.
    static func last(_ operation: String, _ path: String) -> SystemError {
        SystemError(operation: operation, path: path, code: errno)
    }
}

extension SystemError {
    /// What errno says, in words.
    public var reason: String { String(cString: strerror(code)) }
}
