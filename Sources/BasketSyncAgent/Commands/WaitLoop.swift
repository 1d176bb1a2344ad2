import BasketSync
import Glibc

/// The loop every `wait` sleeps in — on a sync directory or a tree's root: a look, then sleep on
/// inotify until an event worth a look (a commit, the outbox changing), the poll interval where
/// inotify is blind, or the deadline; it ends with the process that started it (a host killed
/// while it loops on `wait`: looked at every second, the parent gone, it was adopted by another).
struct WaitLoop {
    /// The watches, placed before the first look: what is committed after them is seen by a look.
    let inotify: Inotify
    /// What is gone when a watched directory is removed or moved (`.directoryGone`).
    let path: String
    /// The poll interval, in milliseconds, where inotify is blind; nil: inotify alone.
    let pollMs: Int?
    /// When to give up (`.busy`, 75).
    /// On the monotonic clock: a step of the wall clock neither ends the wait early nor holds it.
    let deadline: Double?
    /// At least this long between two looks (seconds): under a busy agent, the commits in
    /// between are seen by the next look.
    var minimumGap = 0.0
    /// The process that started this one: read when it started, so that one gone before the
    /// loop began is seen gone too.
    private let parent = Posix.parentAtStart

    init(inotify: Inotify, path: String, pollMs: Int?, timeout: Double?, minimumGap: Double = 0) {
        self.inotify = inotify
        self.path = path
        self.pollMs = pollMs
        deadline = timeout.map { Posix.monotonicSeconds() + $0 }
        self.minimumGap = minimumGap
    }

    /// Looks, then again whenever `worthALook` takes an event (or the poll interval passed),
    /// until `look` returns something. Past the deadline: `.busy(timedOut)`. A watched directory
    /// removed or moved ends the loop with what `gone` says of it (by default `.directoryGone`).
    func run<T>(timedOut: @autoclosure () -> String, worthALook: (InotifyEvent) -> Bool,
                gone: (() -> AgentError)? = nil,
                look: () throws(AgentError) -> T?) throws(AgentError) -> T {
        var looking = true
        var nextLook = Posix.monotonicSeconds()
        var lastLook = -Double.infinity
        while true {
            if looking {
                let since = Posix.monotonicSeconds() - lastLook
                if since < minimumGap { Posix.pause(microseconds: UInt32((minimumGap - since) * 1_000_000)) }
                lastLook = Posix.monotonicSeconds()
                if let pollMs { nextLook = lastLook + Double(pollMs) / 1000 }
                if let found = try look() { return found }
            }
            var milliseconds: Int32 = 1000
            if let deadline {
                let left = deadline - Posix.monotonicSeconds()
                if left <= 0 { throw .busy(timedOut()) }
                milliseconds = min(milliseconds, Int32(min(left * 1000, 1000).rounded(.up)))
            }
            if pollMs != nil {
                milliseconds = min(milliseconds, Int32(max(0, ((nextLook - Posix.monotonicSeconds()) * 1000).rounded(.up))))
            }
            if getppid() != parent {
                // Ended at once, as by the SIGTERM its status says (its output is written
                // unbuffered: nothing to flush): `exit` would first run the atexit handlers,
                // which may wait for a lock another thread holds.
                _exit(143)
            }
            var events: [InotifyEvent] = []
            do {
                if try Posix.waitReadable([inotify.fd], timeout: milliseconds)[0] { events = try inotify.events() }
            } catch {
                throw .system(error)
            }
            if events.contains(where: { !$0.mask.isDisjoint(with: [.deleteSelf, .moveSelf]) }) {
                throw gone?() ?? .directoryGone(path: path)
            }
            // Polled: at the interval; otherwise only what is worth it (a process's own reads
            // and closes are not).
            looking = (pollMs != nil && Posix.monotonicSeconds() >= nextLook)
                || events.contains { $0.watch < 0 || $0.mask.contains(.overflow) || worthALook($0) }
        }
    }
}
