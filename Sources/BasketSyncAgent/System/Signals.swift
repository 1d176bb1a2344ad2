import Glibc

/// The write end of the signal pipe, set once before the handlers are installed.
nonisolated(unsafe) private var signalPipeWrite: Int32 = -1

/// Set by the handler of SIGTERM and SIGINT: long work (a backlog of events, thousands of carts)
/// looks at it between events and between carts, and leaves the rest for the next start.
nonisolated(unsafe) private var stopSignalled: sig_atomic_t = 0

/// The line the agent leaves when the step in hand outlasts a second after SIGTERM (written by
/// the SIGALRM handler, which can format nothing), and where it goes.
nonisolated(unsafe) private var abruptLine: UnsafeMutablePointer<UInt8>?
nonisolated(unsafe) private var abruptCount = 0
nonisolated(unsafe) private var abruptFd: Int32 = 2

/// The signals the agent handles.
package enum Signal: UInt8, CaseIterable {
    case hangup = 1
    case interrupt = 2
    case terminate = 15

    var number: Int32 { Int32(rawValue) }
}

/// The self-pipe: each handled signal writes its number into a pipe the event loop polls, so that
/// a signal is handled in the loop, never inside the handler.
package final class SignalPipe {
    /// The read end, for the event loop to poll.
    let fd: Int32

    /// Installs the handlers of every ``Signal`` and unblocks them.
    init(path: String) throws(SystemError) {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw .last("pipe", path) }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            Posix.setNonBlocking(fd)
        }
        signalPipeWrite = fds[1]
        fd = fds[0]
        for signal in Signal.allCases {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { number in
                let saved = errno
                if number == SIGTERM || number == SIGINT {
                    // Within a second, whatever the step in hand: then as a killed process (every
                    // step is safe to cut anywhere: nothing is acknowledged before it is durable).
                    // Cut at 0.9 s, so that the line said and the exit also fit in the second.
                    if stopSignalled == 0 {
                        var cut = itimerval(it_interval: timeval(), it_value: timeval(tv_sec: 0, tv_usec: 900_000))
                        setitimer(__itimer_which_t(ITIMER_REAL.rawValue), &cut, nil)
                    }
                    stopSignalled = 1
                }
                var byte = UInt8(truncatingIfNeeded: number)
                _ = write(signalPipeWrite, &byte, 1)
                errno = saved
            }
            action.sa_flags = SA_RESTART
            sigemptyset(&action.sa_mask)
            sigaction(signal.number, &action, nil)
        }
        var deadline = sigaction()
        deadline.__sigaction_handler.sa_handler = { _ in
            if let line = abruptLine { _ = write(abruptFd, line, abruptCount) }
            _exit(0)
        }
        sigemptyset(&deadline.sa_mask)
        sigaction(SIGALRM, &deadline, nil)
        // A parent may have spawned us with these signals blocked: take them back.
        var handled = sigset_t()
        sigemptyset(&handled)
        for signal in Signal.allCases { sigaddset(&handled, signal.number) }
        pthread_sigmask(SIG_UNBLOCK, &handled, nil)
    }

    /// Sets the line written to `fd` when a step outlasts the second after SIGTERM (the process
    /// then exits 0 at once, as a killed one would stop).
    static func setAbruptStopLine(_ line: [UInt8], fd: Int32) {
        let copy = UnsafeMutablePointer<UInt8>.allocate(capacity: max(1, line.count))
        copy.initialize(from: line, count: line.count)
        abruptCount = line.count
        abruptFd = fd
        abruptLine = copy
    }

    /// Whether SIGTERM or SIGINT came: work in hand stops at the next event or cart.
    package static var stopRequested: Bool { stopSignalled != 0 }

    /// The signals the agent handles, as a set.
    private static var handledSet: sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in Signal.allCases { sigaddset(&set, signal.number) }
        return set
    }

    /// Blocks the handled signals until ``init(path:)`` installs their handlers (or
    /// ``releaseHeld()`` gives them back): a SIGTERM in the agent's first milliseconds waits for its
    /// handler instead of killing it. The mask survives `exec`.
    package static func hold() {
        var set = handledSet
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// Unblocks what ``hold()`` blocked, for a command that installs no handler: a signal held
    /// meanwhile then acts as it would have.
    package static func releaseHeld() {
        var set = handledSet
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
    }

    /// The signals received since the last call, in order.
    func drain() -> [Signal] {
        var result: [Signal] = []
        var buffer = [UInt8](repeating: 0, count: 256)
        while true {
            let read = buffer.withUnsafeMutableBytes { try? Posix.read(fd, into: $0, path: "signal pipe") }
            guard let count = read ?? nil, count > 0 else { return result }
            result += buffer[0..<count].compactMap(Signal.init(rawValue:))
        }
    }
}
