import BasketSync
import BasketSyncWire
import Glibc

/// The write end of the signal pipe, set once before the handlers are installed.
nonisolated(unsafe) private var signalPipeWrite: Int32 = -1

/// `basket-sync watch`: the long-running agent of one sync directory.
///
/// One event loop (`poll` on the watcher's pipe and the signal pipe, with the timeout of the next
/// pending-window deadline) and one funnel (``SyncEngine``). Idle, it sleeps in `poll` with no
/// timeout at all: only a file event, a signal or a pending window's expiry wakes it.
public final class Agent {
    private let engine: SyncEngine
    private let logger: Logger
    private var lockFd: Int32 = -1
    /// After a temporary failure (disk full, database busy), when to try again.
    private var retryAt: Date?
    private var retryDelay: Double = 0.5
    /// `--log-format`, which wins over the configuration's `logFormat`.
    private let logFormat: LogFormat?

    /// Opens the sync directory for watching; `registered: false` is `--no-synchronizer`.
    public init(directory: String, registered: Bool, logFormat: LogFormat?, logger: Logger) throws(AgentError) {
        self.logger = logger
        self.logFormat = logFormat
        engine = try SyncEngine(directory: directory, registered: registered, logger: logger)
        logger.format = logFormat ?? engine.configuration.logFormat
    }

    /// Takes the directory's agent lock; a second agent fails as busy and names the first one's pid.
    private func lock() throws(AgentError) {
        let path = "\(engine.store.stateDirectory)/agent.lock"
        let fd: Int32
        do { fd = try Posix.open(path, O_RDWR | O_CREAT, mode: 0o600) } catch { throw .system(error) }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            var buffer = [UInt8](repeating: 0, count: 32)
            let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 31, 0) }
            let pid = String(decoding: buffer[0..<max(0, count)], as: UTF8.self).filter(\.isNumber)
            Posix.close(fd)
            throw .busy("\(engine.directory): another basket-sync watch (pid \(pid.isEmpty ? "unknown" : pid)) is already watching this directory; stop it first, or use basket-sync sync beside it")
        }
        _ = ftruncate(fd, 0)
        let text = Array("\(getpid())\n".utf8)
        _ = text.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        lockFd = fd
    }

    private func installSignalHandlers() throws(AgentError) -> Int32 {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw .system(SystemError(operation: "pipe", path: engine.directory, code: errno)) }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        }
        signalPipeWrite = fds[1]
        for signal in [SIGTERM, SIGINT, SIGHUP] {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { number in
                let saved = errno
                var byte = UInt8(truncatingIfNeeded: number)
                _ = write(signalPipeWrite, &byte, 1)
                errno = saved
            }
            action.sa_flags = SA_RESTART
            sigemptyset(&action.sa_mask)
            sigaction(signal, &action, nil)
        }
        // A parent may have spawned us with these signals blocked: take them back.
        var handled = sigset_t()
        sigemptyset(&handled)
        for signal in [SIGTERM, SIGINT, SIGHUP] { sigaddset(&handled, signal) }
        pthread_sigmask(SIG_UNBLOCK, &handled, nil)
        return fds[0]
    }

    /// Runs until SIGTERM or SIGINT, then returns (exit 0). Throws when it cannot start or must stop.
    public func run() throws(AgentError) {
        try lock()
        let signals = try installSignalHandlers()
        try Posix.makeDirectoryTree(engine.inbox("new"))
        try Posix.makeDirectoryTree(engine.inbox("cur"))
        try Posix.makeDirectoryTree(engine.inbox("tmp"))
        let watcher = try Watcher(directory: engine.directory, cart: engine.configuration.cart)
        logger.log(.info, "watching \(engine.directory) (cart \(engine.configuration.cart), pid \(getpid())\(engine.registered ? "" : ", no synchronizer registered: Mealz deltas are ignored"))")

        // Everything written before the watches were in place: recover the files, take what waits.
        attempt { () throws(AgentError) in
            try engine.publishAll()
            try engine.takeInbox()
            try engine.takeCart()
            try engine.expireWindows()
        }
        attempt { () throws(AgentError) in try engine.refreshDeadline() }

        var fds = [pollfd(fd: watcher.fd, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: signals, events: Int16(POLLIN), revents: 0)]
        while true {
            let timeout = pollTimeout()
            let ready = poll(&fds, nfds_t(fds.count), timeout)
            if ready < 0 {
                if errno == EINTR { continue }
                throw .system(SystemError(operation: "poll", path: engine.directory, code: errno))
            }
            if fds[1].revents != 0 {
                for signal in drain(signals) {
                    if signal == UInt8(SIGHUP) {
                        do {
                            try engine.reloadConfiguration()
                            logger.format = logFormat ?? engine.configuration.logFormat
                            logger.log(.info, "reloaded \(AgentConfiguration.fileName)")
                        } catch {
                            engine.reportError(error)
                        }
                    } else {
                        logger.log(.info, "stopping on signal \(signal)")
                        return
                    }
                }
            }
            if fds[0].revents != 0 {
                let changes = try watcher.changes()
                if changes.contains(.directoryGone) {
                    throw .missingInput("\(engine.directory): the sync directory or its .basket-sync/ was removed or moved away, and the state with it; restore it and start the agent again")
                }
                let everything = changes.contains(.overflow)
                if everything { logger.log(.warning, "the inotify queue overflowed: reading everything again") }
                attempt { () throws(AgentError) in
                    if everything || changes.contains(.commit) {
                        try engine.publishAll()
                        try engine.refreshDeadline()
                    }
                    // The inbox first: a cart may acknowledge the records its events make.
                    if everything || changes.contains(.inbox) { try engine.takeInbox() }
                    if everything || changes.contains(.cart) { try engine.takeCart() }
                }
            }
            if let due = retryAt {
                if due <= Date() {
                    retryAt = nil
                    attempt { () throws(AgentError) in
                        try engine.publishAll()
                        try engine.takeInbox()
                        try engine.takeCart()
                        try engine.expireWindows()
                    }
                }
            } else if let deadline = engine.nextDeadline, deadline <= Date() {
                attempt { () throws(AgentError) in try engine.expireWindows() }
            }
        }
    }

    /// Runs a step; a failure is reported and retried later with a growing delay, never fatal.
    private func attempt(_ body: () throws(AgentError) -> Void) {
        do {
            try body()
            retryDelay = 0.5
        } catch {
            engine.reportError(error)
            retryAt = Date().addingTimeInterval(retryDelay)
            retryDelay = min(retryDelay * 2, 30)
        }
    }

    /// Milliseconds until the next pending window or retry; -1 (sleep until an event) when none.
    /// While a retry is due it waits for that alone: the retry expires the windows too, and a
    /// window already past must not turn a failing step into a busy loop.
    private func pollTimeout() -> Int32 {
        guard let due = retryAt ?? engine.nextDeadline else { return -1 }
        let milliseconds = (due.timeIntervalSinceNow * 1000).rounded(.up)
        return Int32(max(0, min(milliseconds, Double(Int32.max))))
    }

    private func drain(_ fd: Int32) -> [UInt8] {
        var result: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 256)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count <= 0 { return result }
            result.append(contentsOf: buffer[0..<count])
        }
    }
}
