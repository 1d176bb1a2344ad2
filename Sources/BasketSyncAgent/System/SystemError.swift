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

extension SystemError {
    /// EACCES, for errors made without a failed call.
    static let permissionDenied = EACCES

    /// The file or directory does not exist (ENOENT).
    var isMissing: Bool { code == ENOENT }

    /// The path is a directory where a file was expected (EISDIR).
    var isDirectory: Bool { code == EISDIR }

    /// What `errno` says now, for a call that just failed.
    static func last(_ operation: String, _ path: String) -> SystemError {
        SystemError(operation: operation, path: path, code: errno)
    }
}

extension SystemError {
    /// What errno says, in words.
    var reason: String { String(cString: strerror(code)) }
}
