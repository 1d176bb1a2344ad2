import BasketSync
import BasketSyncWire

extension Store {
    // MARK: Locks

    /// Opens `name` in the state directory and takes its exclusive lock (in a tree, the cart's
    /// byte of it), waiting `waitingAtMost` seconds at most for another process to let it go,
    /// then busy (75); closing the descriptor releases it (so does the process dying).
    func lock(_ name: String, waitingAtMost: Double) throws(AgentError) -> Int32 {
        let path = "\(stateDirectory)/\(name)"
        let fd: Int32
        do { fd = try Posix.open(path, [.readWrite, .create], mode: 0o600) } catch { throw .system(error) }
        let taken: Bool
        do { taken = try takeWaiting(fd, path: path, atMost: waitingAtMost) } catch {
            Posix.close(fd)
            throw .system(error)
        }
        if taken { return fd }
        Posix.close(fd)
        throw .busy("\(path): another basket-sync process has held it for \(Self.shown(waitingAtMost)) — try again, or find the process that holds it (a command stopped with Ctrl-Z holds it until it goes on or ends)")
    }

    /// Takes the exclusive lock of `fd` (in a tree, the cart's byte of it), trying again after
    /// 1 ms, then less and less often (50 ms at most) — a holder keeps it for moments, and a long
    /// wait costs next to nothing — for `atMost` seconds; false when another process still holds it.
    private func takeWaiting(_ fd: Int32, path: String, atMost: Double) throws(SystemError) -> Bool {
        let deadline = Posix.monotonicSeconds() + atMost
        var pause = 0.001
        while true {
            if try cart == 0 ? Posix.lockExclusive(fd, wait: false, path: path) : Posix.lockByte(fd, at: cart, wait: false, path: path) { return true }
            let left = deadline - Posix.monotonicSeconds()
            if left <= 0 { return false }
            Posix.pause(microseconds: UInt32(min(pause, left) * 1_000_000))
            pause = min(pause * 2, 0.05)
        }
    }

    /// A lock's wait as said in a message.
    private static func shown(_ wait: Double) -> String { !wait.isFinite ? "ever" : wait < 1 ? "\(Int(wait * 1000)) ms" : "\(Int(wait)) s" }

    /// Takes the JSON Lines files' writers' lock (`projections.lock`: in a tree, the cart's byte
    /// of it) on the descriptor the database keeps open; ``unlockProjections(_:)`` lets it go.
    /// Not for a second thread: a lock belongs to the open file, which the thread would share.
    /// `waitingAtMost`: how long another process may hold it before this fails as busy (75) —
    /// every process waits a bounded time, so that a process holding a cart's lock (a slow
    /// `sync`, one stopped with Ctrl-Z) holds up that cart alone, never a command for ever nor the
    /// other carts of a tree.
    func lockProjections(waitingAtMost: Double = SyncEngine.writersLockWait) throws(AgentError) -> Int32 {
        let path = database.projectionsLockPath
        do {
            let fd = try database.projectionsLockDescriptor()
            if try takeWaiting(fd, path: path, atMost: waitingAtMost) { return fd }
        } catch { throw .system(error) }
        let waited = Self.shown(waitingAtMost)
        let files = cart == 0 ? "this directory's files (\(path))" : "this cart's files (its byte of \(path))"
        throw .busy("\(shownDirectory): another basket-sync process has held \(files) for \(waited); its new lines wait for it (the records are in the database: nothing is lost) — try again, or find the process that holds it (a command stopped with Ctrl-Z holds it until it goes on or ends)")
    }

    /// Lets go the lock ``lockProjections(waitingAtMost:)`` took.
    func unlockProjections(_ fd: Int32) {
        if cart == 0 { Posix.unlock(fd) } else { Posix.unlockByte(fd, at: cart) }
    }

    /// Locks `orderId`'s byte of `payments.lock` (an open-file-description lock), waiting for it;
    /// `waiting` is called first when another process holds it. Other orders are not held up.
    func lockOrder(_ orderId: String, waiting: () -> Void) throws(AgentError) -> Int32 {
        let path = "\(stateDirectory)/payments.lock"
        let fd: Int32
        do { fd = try Posix.open(path, [.readWrite, .create], mode: 0o600) } catch { throw .system(error) }
        // A second name for it would be a file elsewhere that this lock writes to.
        if let info = try? Posix.fileInfo(fd, path: path), info.links > 1 {
            Posix.close(fd)
            throw .refused("\(path): has another name (a hard link); remove it, basket-sync makes it again")
        }
        // FNV-1a of the id's bytes: two orders share a byte (and wait for each other) only by a
        // 1 in 2^46 chance.
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in orderId.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
        // In a tree the same order id in two carts is two orders.
        if cart != 0 { for byte in String(cart).utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 } }
        let offset = Int64(hash & 0x3FFF_FFFF_FFFF)
        do {
            if try !Posix.lockByte(fd, at: offset, wait: false, path: path) {
                waiting()
                _ = try Posix.lockByte(fd, at: offset, wait: true, path: path)
            }
        } catch {
            Posix.close(fd)
            throw .system(error)
        }
        return fd
    }

    // MARK: Payment completions

    /// When the completion of `handle-payment` for `orderId` finished successfully; nil when it
    /// never did (none was given, it failed, or the process died while it ran).
    func completionFinished(orderId: String) throws(AgentError) -> String? {
        let statement = try cached("SELECT at FROM completions WHERE cart = ? AND order_id = ?")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, orderId)
        return try statement.step() ? statement.text(0) : nil
    }

    /// Remembers that the completion for `orderId` is about to run: until it exits 0, retention
    /// keeps the order (and its payment record), so that a retry still finds it.
    func markUnfinished(orderId: String, at: Date) throws(AgentError) {
        let statement = try cached("INSERT OR IGNORE INTO unfinished(cart, order_id, at) VALUES(?, ?, ?)")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, orderId)
        statement.bind(3, Timestamp.text(at))
        _ = try statement.step()
    }

    /// Counts `at` as the order's last activity (a retry, its completion's end): retention keeps
    /// the order, its record and its completion for the retention period from then.
    func touchOrder(_ orderId: String, at: Date) throws(AgentError) {
        try noteRetentionClock()
        let statement = try cached("UPDATE orders SET at = ?3 WHERE cart = ?1 AND id = ?2 AND at < ?3")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, orderId)
        statement.bind(3, Timestamp.text(at))
        _ = try statement.step()
    }

    /// Records that the completion for `orderId` (payment `payment`) exited 0: it never runs again.
    func recordCompletion(orderId: String, payment: UInt64, at: Date) throws(AgentError) {
        try touchOrder(orderId, at: at)
        let finished = try cached("DELETE FROM unfinished WHERE cart = ? AND order_id = ?")
        defer { finished.reset() }
        finished.bind(1, cart)
        finished.bind(2, orderId)
        _ = try finished.step()
        let statement = try cached("INSERT OR IGNORE INTO completions(cart, order_id, payment, at) VALUES(?, ?, ?, ?)")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, orderId)
        statement.bind(3, Int64(payment))
        statement.bind(4, Timestamp.text(at))
        _ = try statement.step()
    }

    // MARK: Reports

    /// Keeps a report (a rollback, a late echo, an ignored batch, an error) for `status`.
    func report(level: String, message: String, at: Date) throws(AgentError) {
        let statement = try cached("INSERT INTO reports(cart, at, level, message) VALUES(?, ?, ?, ?)")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, Timestamp.text(at))
        statement.bind(3, level)
        statement.bind(4, PinnedNames.named(message))
        _ = try statement.step()
        // The last 1,000 of the cart are kept: looked for at this store's first report and every
        // 64th (finding the 1,001st walks 1,000 rows, most of a report's cost), so a cart holds
        // at most 63 more per process writing its reports.
        reportsUntilTrim -= 1
        guard reportsUntilTrim <= 0 else { return }
        reportsUntilTrim = 64
        let trim = try cached("DELETE FROM reports WHERE cart = ?1 AND n <= (SELECT n FROM reports WHERE cart = ?1 ORDER BY n DESC LIMIT 1 OFFSET 1000)")
        defer { trim.reset() }
        trim.bind(1, cart)
        _ = try trim.step()
    }

    /// The latest reports, newest first.
    func reports(limit: Int, level: String? = nil) throws(AgentError) -> [(at: String, level: String, message: String)] {
        let statement = try cached(level == nil
            ? "SELECT at, level, message FROM reports WHERE cart = ?1 ORDER BY n DESC LIMIT ?2"
            : "SELECT at, level, message FROM reports WHERE cart = ?1 AND level = ?3 ORDER BY n DESC LIMIT ?2")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, Int64(limit))
        if let level { statement.bind(3, level) }
        var result: [(at: String, level: String, message: String)] = []
        while try statement.step() { result.append((statement.text(0), statement.text(1), statement.text(2))) }
        return result
    }

    // MARK: Waking the agent

    /// Tells a running agent that this process committed: a sync directory's commit signal, a
    /// tree cart's marker then the tree's commit signal (a polling agent looks at the markers
    /// when that changed). `tellingTheTree: false` leaves the tree's to the caller, which
    /// signals many carts' commits and touches it once after them.
    func signalCommit(tellingTheTree: Bool = true) {
        Posix.touch(signalPath, mode: 0o600)
        if cart != 0, tellingTheTree { database.signalCommit() }
    }
}
