import BasketSync
import BasketSyncWire
import Synchronization

extension Store {
    // MARK: Ids kept for deduplication

    /// The payment seq `handlePayment` recorded for an order, if it did (and retention kept it).
    func orderSeq(_ orderId: String) throws(AgentError) -> UInt64? {
        let statement = try cached("SELECT seq FROM orders WHERE cart = ? AND id = ?")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, orderId)
        return try statement.step() ? UInt64(statement.int64(0)) : nil
    }

    /// Notes the least wall clock less boot clock seen on this boot (``Note/retentionClock``)
    /// when `now` is lower by more than a second, or none is noted for this boot; returns the
    /// one kept and `now`'s. Every row retention ages notes it as it is stamped, and retention
    /// itself: on one boot, no age is counted past the boot-clock time since the stamp
    /// (``SyncEngine/retentionNow(_:)``).
    @discardableResult
    func noteRetentionClock(_ now: Date = Date()) throws(AgentError) -> (least: Double, offset: Double) {
        let offset = now.timeIntervalSince1970 - Posix.bootSeconds()
        if let least = Store.offsetOfThisBoot(try note(.retentionClock)), offset >= least - 1 { return (least, offset) }
        try setNote(.retentionClock, Store.bootOffsetNote(offset))
        return (offset, offset)
    }

    /// A wall clock less boot clock as noted for this boot (`OFFSET BOOT`: ``Note/clock``,
    /// ``Note/retentionClock``), or nil: none, another boot's, or not one.
    static func offsetOfThisBoot(_ note: String?) -> Double? {
        guard let note else { return nil }
        // A change reads these notes a few times, nearly always the same text: the last one
        // read is kept with its reading (a number's parse was most of the cost).
        if let known = offsetNoteRead.withLock({ $0 }), known.note == note { return known.offset }
        var offset: Double?
        let fields = note.fields(UInt8(ascii: " "))
        if fields.count == 2, let number = Double(fields[0]), number.isFinite, fields[1] == Posix.bootId[...] { offset = number }
        offsetNoteRead.withLock { $0 = (note, offset) }
        return offset
    }

    /// The last note ``offsetOfThisBoot(_:)`` read, and what it read in it.
    private static let offsetNoteRead = Mutex<(note: String, offset: Double?)?>(nil)

    /// The note of `offset` on this boot (see ``offsetOfThisBoot(_:)``).
    static func bootOffsetNote(_ offset: Double) -> String { "\(offset) \(Posix.bootId)" }

    func recordOrder(_ orderId: String, seq: UInt64, at: String) throws(AgentError) {
        try noteRetentionClock()
        let statement = try cached("INSERT OR IGNORE INTO orders(cart, id, seq, at) VALUES(?, ?, ?, ?)")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, orderId)
        statement.bind(3, Int64(seq))
        statement.bind(4, at)
        _ = try statement.step()
    }

    /// Whether a `basketTransfer` with this id landed (and retention kept it).
    func transferLanded(_ transferId: String) throws(AgentError) -> Bool {
        let statement = try cached("SELECT 1 FROM transfers WHERE cart = ? AND id = ?")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, transferId)
        return try statement.step()
    }

    func recordTransfer(_ transferId: String, at: String) throws(AgentError) {
        try noteRetentionClock()
        let statement = try cached("INSERT OR IGNORE INTO transfers(cart, id, at) VALUES(?, ?, ?)")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, transferId)
        statement.bind(3, at)
        _ = try statement.step()
    }

    /// Remembers that a file was moved to `inbox/cur/` or `inbox/bad/`, for retention.
    func recordFiled(folder: String, name: String, at: Date) throws(AgentError) {
        try noteRetentionClock()
        let statement = try cached("INSERT OR REPLACE INTO settled(cart, folder, name, at) VALUES(?, ?, ?, ?)")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, folder)
        statement.bind(3, name)
        statement.bind(4, Timestamp.text(at))
        _ = try statement.step()
    }

    // MARK: The cart at the batches

    /// Which version of the cart file existed when a batch was made: `identity` (nil: no cart)
    /// and the first batch seq made while that version stood. A cart read later with the same
    /// identity was written before that batch, and cannot echo it.
    func cartAtBatch() throws(AgentError) -> (identity: FileIdentity?, seq: UInt64, bytesHash: Int64?)? {
        guard let blob = try metaBlob(.cartAtBatch) else { return nil }
        let numbers = NoteNumbers.int64s(blob)
        guard let seq = numbers.first, seq > 0 else { return nil }
        // The seq, the identity (five numbers), then the bytes' hash when it was known.
        return (FileIdentity(numbers: numbers.dropFirst().prefix(5)), UInt64(seq), numbers.count == 7 ? numbers[6] : nil)
    }

    /// The last seq that existed when the cart version `identity` (nil: no cart) appeared: a
    /// version already on disk when record N was committed was written before it (N − 1); any
    /// other appeared after every record (`lastSeq`). What that version can acknowledge or echo.
    /// `showsTheCartTaken` (a tally of the whole cart) is asked only when the times alone cannot
    /// tell.
    /// `bytesHash`: ``CartReader/contentHash(_:)`` of the version's bytes, given only for a cart
    /// that says `syncedThrough` — bytes that say what the host applied are what the host knew, so
    /// the same bytes as a version seen before (see ``cartVersions()``) were written by then,
    /// whatever their times or inode. A cart without `syncedThrough` is judged by its identity
    /// alone: a host going back to the same lines is a new version.
    func writtenThrough(cart identity: FileIdentity?, bytesHash: @autoclosure () -> Int64?, lastSeq: UInt64, showsTheCartTaken: @autoclosure () -> Bool) throws(AgentError) -> UInt64 {
        var through = lastSeq
        let hash = identity != nil ? bytesHash() : nil
        if let hash, let known = try cartVersions().first(where: { $0.hash == hash }) { through = min(known.through, through) }
        guard let observed = try cartAtBatch() else { return through }
        // A note of the version from before the versions were kept by their bytes.
        if let hash, let kept = observed.bytesHash, observed.identity != identity, hash == kept { through = min(observed.seq - 1, through) }
        // The same version: device, inode, size and both times. Only the change time moved (a
        // chmod, a chown, a new hard link — or a write in place that kept the modification time
        // and the size: `touch -r`, a copy keeping times): the same version when the cart shows
        // the lines last taken, a new one when it does not.
        let same = observed.identity == identity || observed.identity.map { old in
            identity.map { $0.device == old.device && $0.inode == old.inode && $0.size == old.size && $0.modified == old.modified } ?? false
        } == true && showsTheCartTaken()
        return same ? min(observed.seq - 1, through) : through
    }

    /// How many versions ``cartVersions()`` keeps: an older version restored after this many
    /// newer ones were kept is judged by its identity alone.
    static let keptCartVersions = 64

    /// Versions of the cart known by their bytes' hash, each with the last seq that existed when
    /// it was written: a version that stood when record N was made (N − 1), or whose claim was
    /// refused when the outbox ended at L (L). The latest last.
    func cartVersions() throws(AgentError) -> [(hash: Int64, through: UInt64)] {
        guard let blob = try metaBlob(.cartVersions) else { return [] }
        let numbers = NoteNumbers.int64s(blob)
        return stride(from: 0, to: numbers.count - 1, by: 2).compactMap { index in
            numbers[index + 1] >= 0 ? (numbers[index], UInt64(numbers[index + 1])) : nil
        }
    }

    /// Remembers, inside the caller's transaction, that the version with these bytes was
    /// written when the outbox ended at `through` or before (the earlier of two notes is kept).
    func noteCartVersion(bytesHash: Int64, through: UInt64) throws(AgentError) {
        var versions = try cartVersions()
        if let index = versions.firstIndex(where: { $0.hash == bytesHash }) {
            guard through < versions[index].through else { return }
            versions[index].through = through
        } else {
            versions.append((bytesHash, through))
            versions.removeFirst(max(0, versions.count - Self.keptCartVersions))
        }
        try setMeta(.cartVersions, NoteNumbers.bytes(versions.flatMap { [$0.hash, Int64(clamping: $0.through)] }))
    }

    func setCartAtBatch(identity: FileIdentity?, seq: UInt64, bytesHash: Int64? = nil) throws(AgentError) {
        let hash = identity != nil ? bytesHash.map { [$0] } ?? [] : []
        try setMeta(.cartAtBatch, NoteNumbers.bytes([Int64(clamping: seq)] + (identity?.numbers ?? []) + hash))
        // The bytes are kept with the record they stood at: the same bytes later (restored,
        // copied) are still the version of that record.
        if let bytesHash = hash.first { try noteCartVersion(bytesHash: bytesHash, through: seq - 1) }
    }

    // MARK: What the JSON Lines files were given

    /// What a JSON Lines file was given, as last remembered.
    func given(_ projection: Projection) throws(AgentError) -> AppendCursor? {
        guard let blob = try metaBlob(.given(projection)), var given = AppendCursor(bytes: blob) else { return nil }
        // The machine started again since lines after `durable` were appended: they are on disk
        // all the same when a flush of their file system began after the note (its note is one
        // for every file it made durable).
        if given.lostAfter != nil, let at = given.at,
           FlushedNote.covers(try database.rootRows.note(.flushed), device: given.device, boot: given.boot, at: at) {
            given.durable = given.seq
        }
        return given
    }

    /// Remembers, inside the caller's transaction (`init --adopt`), that the file was given every
    /// record through `seq`, as no file in particular: the next catch-up reads the file's end (a
    /// torn tail is cut), and a file that no longer holds them (rotated away) starts after them.
    func adoptGiven(_ projection: Projection, seq: UInt64) throws(AgentError) {
        try setMeta(.given(projection), Array("0 0 0 \(seq)".utf8))
    }

    /// Remembers what a file was given. Written without its own fsync (`synchronous=NORMAL`): the
    /// next commit makes it durable; a crash before loses only this note, and the file's own last
    /// record line says the same.
    func setGiven(_ projection: Projection, _ given: AppendCursor) throws(AgentError) {
        try withQuickTransaction { () throws(AgentError) in try noteGiven(projection, given) }
    }

    /// Remembers what a file was given, inside the caller's transaction.
    func noteGiven(_ projection: Projection, _ given: AppendCursor) throws(AgentError) {
        try setMeta(.given(projection), given.bytes)
    }

    /// Remembers what a file was given, inside the caller's transaction, unless a note of it is
    /// there already.
    func noteGivenUnlessNoted(_ projection: Projection, _ given: AppendCursor) throws(AgentError) {
        if try metaBlob(.given(projection)) == nil { try setMeta(.given(projection), given.bytes) }
    }

    /// Runs a kept statement once.
    private func step(_ statement: SQLiteConnection.Statement) throws(AgentError) {
        defer { statement.reset() }
        _ = try statement.step()
    }

    /// A transaction whose commit has no fsync of its own (`synchronous=NORMAL`): durable with the
    /// next commit that has one. For notes that a crash may take back at no cost. Inside a
    /// transaction already, the notes go with it (SQLite changes neither the safety level nor
    /// the transaction there).
    func withQuickTransaction<T>(_ body: () throws(AgentError) -> T) throws(AgentError) -> T {
        if connection.inTransaction { return try body() }
        // Kept statements: a pragma compiled for every quick note cost more than the note.
        try step(cached("PRAGMA synchronous=NORMAL"))
        defer { try? step(cached("PRAGMA synchronous=FULL")) }
        return try withTransaction(body)
    }

    // MARK: Records

    /// Takes a record line from a file into the database (`init --adopt`); a seq already there is kept.
    func adopt(_ projection: Projection, seq: UInt64, line: [UInt8]) throws(AgentError) {
        try insert(projection, seq: seq, line: line, keepingExisting: true)
    }

    /// Stores one record's line.
    func insert(_ projection: Projection, seq: UInt64, line: [UInt8], keepingExisting: Bool = false) throws(AgentError) {
        let statement = try cached(keepingExisting ? "INSERT OR IGNORE INTO {table}(cart, seq, line) VALUES(?, ?, ?)" : "INSERT INTO {table}(cart, seq, line) VALUES(?, ?, ?)", table: projection)
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, Int64(seq))
        statement.bind(3, line)
        _ = try statement.step()
    }

    /// The lines of a projection after `seq`, in order, with their seq.
    package func lines(_ projection: Projection, after seq: UInt64) throws(AgentError) -> [(seq: UInt64, line: [UInt8])] {
        let statement = try cached("SELECT seq, line FROM {table} WHERE cart = ? AND seq > ? ORDER BY seq", table: projection)
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, Int64(seq))
        var result: [(seq: UInt64, line: [UInt8])] = []
        while try statement.step() { result.append((UInt64(statement.int64(0)), statement.blob(1))) }
        return result
    }

    /// The line stored for one seq, with its newline; nil when there is none.
    func line(_ projection: Projection, seq: UInt64) throws(AgentError) -> [UInt8]? {
        let statement = try cached("SELECT line FROM {table} WHERE cart = ? AND seq = ?", table: projection)
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, Int64(bitPattern: seq))
        return try statement.step() ? statement.blob(0) : nil
    }

    /// The highest seq stored for a projection (0 when none).
    func lastSeq(_ projection: Projection) throws(AgentError) -> UInt64 {
        let statement = try cached("SELECT COALESCE(MAX(seq), 0) FROM {table} WHERE cart = ?", table: projection)
        defer { statement.reset() }
        statement.bind(1, cart)
        return try statement.step() ? UInt64(statement.int64(0)) : 0
    }

    // MARK: Retention

    /// Removes up to `limit` records below `bound`, lowest first, while `removable` says so (it
    /// stops at the first one it refuses: records are in seq order, and so in time). Returns how
    /// many it removed.
    ///
    /// `keeping` are passed over (outbox: the batches rolled back and never echoed since; payments:
    /// those of orders whose completion never finished or whose last activity is at or after
    /// `cutoff`, found here).
    func removeRecords(
        _ projection: Projection, below bound: UInt64, keeping: Set<UInt64> = [], activeSince cutoff: String, limit: Int,
        removable: (UInt64, [UInt8]) -> Bool
    ) throws(AgentError) -> Int {
        let unfinished = projection == .payments ? " AND seq NOT IN (SELECT seq FROM orders WHERE cart = ?1 AND (at >= ?4 OR id IN (SELECT order_id FROM unfinished WHERE cart = ?1)))" : ""
        let select = try cached(built: "SELECT seq, line FROM \(projection.rawValue) WHERE cart = ?1 AND seq < ?2\(unfinished) ORDER BY seq LIMIT ?3")
        defer { select.reset() }
        select.bind(1, cart)
        select.bind(2, Int64(bound))
        select.bind(3, Int64(limit + keeping.count))
        if projection == .payments { select.bind(4, cutoff) }
        var removed: [Int64] = []
        while try select.step(), removed.count < limit {
            let seq = select.int64(0)
            if keeping.contains(UInt64(seq)) { continue }
            guard removable(UInt64(seq), select.blob(1)) else { break }
            removed.append(seq)
        }
        select.reset()
        let delete = try cached("DELETE FROM {table} WHERE cart = ? AND seq = ?", table: projection)
        for seq in removed {
            delete.bind(1, cart)
            delete.bind(2, seq)
            _ = try delete.step()
            delete.reset()
        }
        return removed.count
    }

    /// Forgets up to `limit` ids of each kind (inbox events, transfers, orders and their
    /// completions) recorded before `cutoff` — an order by its last activity (its record, a retry,
    /// its completion's end), its completion with it.
    func forgetIds(olderThan cutoff: String, limit: Int) throws(AgentError) -> (count: Int, more: Bool) {
        var count = 0
        var more = false
        for (table, keep) in [("inbox", ""), ("transfers", ""), ("orders", " AND id NOT IN (SELECT order_id FROM unfinished WHERE cart = ?1)"),
                              ("completions", " AND order_id NOT IN (SELECT id FROM orders WHERE cart = ?1)")] {
            // An order whose completion never finished is kept: its retry must find it.
            let statement = try cached(built: "DELETE FROM \(table) WHERE rowid IN (SELECT rowid FROM \(table) WHERE cart = ?1 AND at < ?2\(keep) ORDER BY at LIMIT ?3)")
            defer { statement.reset() }
            statement.bind(1, cart)
            statement.bind(2, cutoff)
            statement.bind(3, Int64(limit))
            _ = try statement.step()
            let changed = connection.changes
            count += changed
            if changed == limit { more = true }
        }
        return (count, more)
    }

    /// Files moved to `inbox/cur/` or `inbox/bad/` before `cutoff`, oldest first, at most `limit`.
    func filedFiles(olderThan cutoff: String, limit: Int) throws(AgentError) -> [(folder: String, name: String)] {
        let statement = try cached("SELECT folder, name FROM settled WHERE cart = ? AND at < ? ORDER BY at LIMIT ?")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, cutoff)
        statement.bind(3, Int64(limit))
        var files: [(folder: String, name: String)] = []
        while try statement.step() { files.append((statement.text(0), statement.text(1))) }
        return files
    }

    /// Whether `name` in `inbox/FOLDER/` is known as filed there (by this process or another).
    func isFiled(folder: String, name: String) throws(AgentError) -> Bool {
        let statement = try cached("SELECT 1 FROM settled WHERE cart = ? AND folder = ? AND name = ?")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, folder)
        statement.bind(3, name)
        return try statement.step()
    }

    /// Forgets files retention removed.
    func forgetFiled(_ files: [(folder: String, name: String)]) throws(AgentError) {
        let statement = try cached("DELETE FROM settled WHERE cart = ? AND folder = ? AND name = ?")
        for file in files {
            statement.bind(1, cart)
            statement.bind(2, file.folder)
            statement.bind(3, file.name)
            _ = try statement.step()
            statement.reset()
        }
    }

    /// Gives the pages retention freed back to the file system (inside the caller's transaction).
    func vacuumFreePages() throws(AgentError) {
        try connection.execute("PRAGMA incremental_vacuum")
    }

    /// Converts a database made before `auto_vacuum=INCREMENTAL` (SQLite sets it only on a new
    /// one, or by rebuilding it with `VACUUM`), once, so that retention can shrink it.
    func useIncrementalVacuum() throws(AgentError) {
        guard !database.readOnly, try connection.scalar("PRAGMA auto_vacuum") != 2 else { return }
        try connection.execute("PRAGMA auto_vacuum=INCREMENTAL")
        try connection.execute("VACUUM")
    }

    // MARK: Inbox

    /// The outcome recorded for an inbox event id, if it was taken before.
    func inboxOutcome(id: String) throws(AgentError) -> String? {
        let statement = try cached("SELECT outcome FROM inbox WHERE cart = ? AND id = ?")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, id)
        return try statement.step() ? statement.text(0) : nil
    }

    /// The inbox file name an event id was taken from, if it was taken.
    func inboxFile(id: String) throws(AgentError) -> String? {
        let statement = try cached("SELECT file FROM inbox WHERE cart = ? AND id = ?")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, id)
        return try statement.step() ? statement.text(0) : nil
    }

    func recordInbox(id: String, file: String, outcome: String, at: Date, unlessKnown: Bool = false) throws(AgentError) {
        try noteRetentionClock()
        let statement = try cached(unlessKnown ? "INSERT OR IGNORE INTO inbox(cart, id, file, outcome, at) VALUES(?, ?, ?, ?, ?)" : "INSERT INTO inbox(cart, id, file, outcome, at) VALUES(?, ?, ?, ?, ?)")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, id)
        statement.bind(3, file)
        statement.bind(4, outcome)
        statement.bind(5, Timestamp.text(at))
        _ = try statement.step()
    }

    func inboxCount() throws(AgentError) -> Int64 {
        let statement = try cached("SELECT COUNT(*) FROM inbox WHERE cart = ?")
        defer { statement.reset() }
        statement.bind(1, cart)
        return try statement.step() ? statement.int64(0) : 0
    }

}
