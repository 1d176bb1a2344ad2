import Glibc

/// systemd's notification protocol (sd_notify(3)) spoken directly: a datagram to the socket named
/// by `NOTIFY_SOCKET` — a path, or `@name` for the abstract namespace. Without the variable it
/// does nothing: no dependency on libsystemd, nothing when run by hand.
package enum SystemdNotify {
    /// The socket's address, read once.
    private static let address: String? = {
        guard let path = Posix.environment("NOTIFY_SOCKET"), !path.isEmpty, path.hasPrefix("/") || path.hasPrefix("@") else { return nil }
        return path
    }()

    /// The watchdog's interval (`WATCHDOG_USEC`, for this process when `WATCHDOG_PID` says so),
    /// in seconds; nil when the unit has none.
    package static let watchdogSeconds: Double? = {
        guard let text = Posix.environment("WATCHDOG_USEC"), let usec = Double(text), usec > 0 else { return nil }
        if let pid = Posix.environment("WATCHDOG_PID").flatMap(Int32.init), pid != getpid() { return nil }
        return usec / 1_000_000
    }()

    /// Sends `state` (`READY=1`, `WATCHDOG=1`, `STATUS=…`, `STOPPING=1`, lines joined by `\n`);
    /// whether it was sent. A failure is not the agent's: systemd then sees no notification.
    @discardableResult
    package static func send(_ state: String) -> Bool {
        guard let address else { return false }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var socketAddress = sockaddr_un()
        socketAddress.sun_family = sa_family_t(AF_UNIX)
        var path = Array(address.utf8)
        let abstract = path.first == UInt8(ascii: "@")
        if abstract { path[0] = 0 }
        let capacity = MemoryLayout.size(ofValue: socketAddress.sun_path)
        guard path.count < capacity else { return false }
        withUnsafeMutableBytes(of: &socketAddress.sun_path) { raw in
            for (index, byte) in path.enumerated() { raw[index] = byte }
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + path.count + (abstract ? 0 : 1))
        let bytes = Array(state.utf8)
        let sent = withUnsafePointer(to: &socketAddress) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sockaddrPointer in
                sendto(fd, bytes, bytes.count, Int32(MSG_NOSIGNAL), sockaddrPointer, length)
            }
        }
        return sent == bytes.count
    }
}
