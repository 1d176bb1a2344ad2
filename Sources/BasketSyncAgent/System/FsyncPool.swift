import Foundation
import Glibc

/// fsyncs the files of a group from several threads at once: a disk takes concurrent fsyncs
/// together (the block layer merges their flushes), where one after the other each waits for
/// its own. The threads are made once, at the first group of two files or more, and wait
/// between groups; the calling thread works too. Each file's failure is its own (its fsync
/// reports it), so a failing file takes back only its lines.
final class FsyncPool: @unchecked Sendable {
    /// How many files are fsynced at once at most (the calling thread included).
    let width: Int
    private let condition = NSCondition()
    // Guarded by `condition`.
    private var files: [(fd: Int32, path: String)] = []
    private var next = 0
    private var done = 0
    private var failures: [SystemError?] = []
    private var started = false

    /// A pool fsyncing up to `width` files at once (1: one after the other in the caller).
    init(width: Int) {
        self.width = max(1, width)
    }

    /// fsyncs every file of `group`; returns each one's failure, in order.
    func fsyncAll(_ group: [(fd: Int32, path: String)]) -> [SystemError?] {
        if group.count <= 1 || width <= 1 { return group.map(Self.fsync) }
        condition.lock()
        if !started {
            started = true
            for _ in 1..<width {
                let thread = Thread { [self] in serve() }
                thread.stackSize = 64 * 1024
                thread.start()
            }
        }
        files = group
        next = 0
        done = 0
        failures = Array(repeating: nil, count: group.count)
        condition.broadcast()
        work()
        while done < files.count { condition.wait() }
        let result = failures
        files = []
        condition.unlock()
        return result
    }

    /// A pool thread: takes files while a group has some left, waits otherwise.
    private func serve() {
        condition.lock()
        while true {
            while next >= files.count { condition.wait() }
            work()
        }
    }

    /// Takes the group's files one by one until none is left to take (called and returns with
    /// the lock held; fsyncs without it).
    private func work() {
        while next < files.count {
            let index = next
            let file = files[index]
            next += 1
            condition.unlock()
            let failure = Self.fsync(file)
            condition.lock()
            failures[index] = failure
            done += 1
            if done == files.count { condition.broadcast() }
        }
    }

    private static func fsync(_ file: (fd: Int32, path: String)) -> SystemError? {
        Posix.retrying({ Glibc.fsync(file.fd) }) != 0 ? .last("fsync", file.path) : nil
    }
}
