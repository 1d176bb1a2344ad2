import CStatfs
import Foundation
import Glibc

/// Writes back file systems (`syncfs`, one call for every file written on each) on a thread of
/// its own, so that the agent's loop goes on meanwhile: lines are flushed off the path of the
/// next change (docs/spec.md §6), any number of carts' together. One batch at a time; its end is
/// said by a byte on ``fd``, which the loop waits on with its other descriptors, and ``take()``
/// gives each file system's failure.
final class BackgroundFlusher: @unchecked Sendable {
    private let condition = NSCondition()
    // Guarded by `condition`.
    private var batch: [(fd: Int32, path: String)]?
    private var results: [SystemError?]?
    private var started = false
    private let readEnd: Int32
    private let writeEnd: Int32
    /// Whether a batch was handed over and not taken back yet (the caller's thread only).
    private(set) var inFlight = false

    /// Readable when a batch is over.
    var fd: Int32 { readEnd }

    /// A flusher; nil when no pipe can be made (the caller flushes itself).
    init?() {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { return nil }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            Posix.setNonBlocking(fd)
        }
        readEnd = fds[0]
        writeEnd = fds[1]
    }

    /// Starts writing back the file system of each descriptor (they stay open until the batch is
    /// taken back).
    func start(_ files: [(fd: Int32, path: String)]) {
        precondition(!inFlight)
        inFlight = true
        condition.lock()
        batch = files
        if !started {
            started = true
            let thread = Thread { [self] in serve() }
            thread.stackSize = 128 * 1024
            thread.start()
        }
        condition.signal()
        condition.unlock()
    }

    /// The failures of the batch, in its order, once it is over; nil while it is not (or none
    /// was started). With `waiting`, waits for it.
    func take(waiting: Bool = false) -> [SystemError?]? {
        guard inFlight else { return nil }
        condition.lock()
        while waiting && results == nil { condition.wait() }
        let done = results
        results = nil
        condition.unlock()
        guard let done else { return nil }
        var byte: UInt8 = 0
        while Glibc.read(readEnd, &byte, 1) > 0 {}
        inFlight = false
        return done
    }

    private func serve() {
        condition.lock()
        while true {
            while batch == nil { condition.wait() }
            let files = batch!
            condition.unlock()
            let failures = files.map { file in
                Posix.retrying({ basket_sync_syncfs(file.fd) }) != 0 ? SystemError.last("syncfs", file.path) : nil
            }
            condition.lock()
            batch = nil
            results = failures
            condition.broadcast()
            var byte: UInt8 = 1
            _ = Glibc.write(writeEnd, &byte, 1)
        }
    }
}
