import BasketSync
import BasketSyncWire

/// The records that JSON Lines files project from the database.
enum Projection: String, CaseIterable, Sendable {
    case outbox
    case notifications
    case payments

    /// The file in the sync directory.
    var fileName: String { "\(rawValue).jsonl" }

    /// Whether a line (with its newline) reads as a whole record of this file.
    func isRecord(_ line: [UInt8]) -> Bool {
        switch self {
        case .outbox: (try? RecordFormat.outboxRecord(line)) != nil
        case .notifications: (try? RecordFormat.notification(line)) != nil
        case .payments: (try? RecordFormat.payment(line)) != nil
        }
    }
}

/// The SQLite database file of a sync directory or of a tree of carts: one connection, its
/// prepared statements, and the transactions. Every row of every table belongs to one cart
/// (column `cart`: 0 in a single sync directory, the cart's number in a tree); a ``Store`` reads
/// and writes one cart's rows.
///
/// Every change runs in one `BEGIN IMMEDIATE` transaction, so the agent and one-shot commands
/// serialize on the database; `synchronous=FULL` makes a commit durable before it returns.
final class Database {
    /// `.basket-sync/` of the sync directory or the tree.
    let stateDirectory: String
    let connection: SQLiteConnection
    /// Opened for reading only: transactions are deferred, nothing is written.
    let readOnly: Bool
    /// The database file, and which file it was when opened (device, inode).
    let databasePath: String
    private let databaseIdentity: [Int64]
    /// The device and inode of `-wal` and `-shm`, once seen.
    private var companionIdentities: [ArraySlice<Int64>?] = [nil, nil]
    /// Counts the transactions and savepoints rolled back: a cart's cached state read before
    /// one may hold what it undid.
    private(set) var rollbacks = 0
    private var statements: [String: SQLiteConnection.Statement] = [:]

    /// The layout this version writes: 2 keeps the ids of orders and transfers in tables, and the
    /// host cart beside the state, not in it; 3 gives every row its cart (a tree of carts).
    static let schemaVersion: Int64 = 3

    /// Opens the database of `directory` (a sync directory or a tree's root), creating
    /// `.basket-sync/` (0700) and the file when `create` is set. `readOnly` opens it for reading
    /// only (`status`): it works on a read-only file system.
    init(directory: String, create: Bool, readOnly: Bool = false, busyTimeoutMilliseconds: Int32 = 15_000) throws(AgentError) {
        self.readOnly = readOnly
        // The directory may be a link (the operator's choice); SQLite opens a database only by a
        // path without links (`SQLITE_OPEN_NOFOLLOW`): its real path is used.
        stateDirectory = "\(Posix.resolved(directory) ?? directory)/\(Store.stateDirectoryName)"
        let databasePath = "\(stateDirectory)/\(Store.databaseName)"
        // SQLite opens these by name, following links and blocking on a FIFO: what is not a
        // regular file (the state directory: not a directory) is refused before it gets there.
        if let info = Posix.linkInfo(stateDirectory), info.kind != .directory {
            throw .system(SystemError(path: stateDirectory, shape: info.kind.name, expectsDirectory: true))
        }
        for path in [databasePath, databasePath + "-wal", databasePath + "-shm"] {
            guard let info = Posix.linkInfo(path) else { continue }
            if info.kind != .regular { throw .system(SystemError(path: path, shape: info.kind.name)) }
            // A hard link: SQLite would write the file its other names are (SPEC §7).
            if info.links > 1 {
                throw .refused("\(path): has \(info.links) names (a hard link): SQLite would write the file the other names are too. Give it a name of its own (cp it to a new file and move that over it; back up with cp or sqlite3 .backup, never with hard links)")
            }
        }
        if !Posix.exists(databasePath) {
            if Posix.isPermissionDenied(databasePath) { throw .system(SystemError(operation: "open the database", path: databasePath, code: SystemError.permissionDenied)) }
            guard create else {
                // Its .basket-sync/ gone but records in the files: the database was lost, and a
                // plain init would refuse (73); the advice is the one that works.
                let holdsRecords = {
                    Projection.allCases.contains {
                        JSONLinesFile.recordBeyond(inFileOrParts: "\(directory)/\($0.fileName)", databaseSeq: 0, isRecord: $0.isRecord) != nil
                    }
                }
                if case .treeRoot = Place.of(directory) {
                    throw .missingInput("\(databasePath): missing: the tree's database is gone; restore \(Store.stateDirectoryName)/ from a backup, or run basket-sync -C \(directory) init --tree --adopt to make it again and adopt the carts with their records")
                }
                if Posix.linkInfo(stateDirectory) != nil || holdsRecords() {
                    throw .missingInput("\(databasePath): missing: the database is gone; restore \(Store.stateDirectoryName)/ from a backup, or run basket-sync init --adopt to go on from the files' records")
                }
                throw .missingInput("\(directory): not a sync directory (no \(Store.stateDirectoryName)/); run basket-sync init there first")
            }
            do {
                try Posix.makeDirectory(stateDirectory, mode: 0o700)
                // SQLite would create it 0644; its -wal and -shm files take the database's mode.
                Posix.close(try Posix.open(databasePath, [.writeOnly, .create], mode: 0o600))
            } catch {
                throw .system(error)
            }
        }
        // SQLite says "unable to open database file" for several causes: name the one at hand.
        if !readOnly, let cause = Posix.unwritable(stateDirectory) {
            throw .system(SystemError(operation: "open the database", path: databasePath, code: cause))
        }
        connection = try SQLiteConnection(path: databasePath, readOnly: readOnly)
        self.databasePath = databasePath
        databaseIdentity = Posix.linkInfo(databasePath)?.identity ?? []
        connection.setBusyTimeout(milliseconds: busyTimeoutMilliseconds)
        // A layout this version does not know would be read wrong, or written over.
        let version = try connection.scalar("PRAGMA user_version") ?? 0
        if version > Database.schemaVersion {
            throw .database(path: databasePath, message: "written by a newer basket-sync (database layout \(version), this one knows up to \(Database.schemaVersion)); run that version, or restore .basket-sync/ from a backup made by this one")
        }
        if readOnly {
            if version < Database.schemaVersion, try connection.scalar("SELECT COUNT(*) FROM sqlite_master WHERE name = 'meta'") != 0 {
                throw .database(path: databasePath, message: "\(Database.olderLayout) (database layout \(version)); run any other command once (basket-sync sync) to bring it up to date, then this one")
            }
            return
        }
        // Pages freed by retention go back to the file system (SQLite can set it only on a new
        // database; an older one is converted once, see ``useIncrementalVacuum()``).
        try connection.execute("PRAGMA auto_vacuum=INCREMENTAL")
        try connection.execute("PRAGMA journal_mode=WAL")
        try connection.execute("PRAGMA synchronous=FULL")
        // The write-ahead log is cut back to this after a checkpoint, not left at its largest.
        try connection.execute("PRAGMA journal_size_limit=8388608")
        try withTransaction { () throws(AgentError) in
            let isOld = try connection.scalar("SELECT COUNT(*) FROM sqlite_master WHERE name = 'meta'") != 0
            if isOld, try connection.scalar("PRAGMA user_version") ?? 0 < 3 {
                try convertToCartRows()
            } else {
                try connection.execute(Database.tables)
                try connection.execute("PRAGMA user_version=\(Database.schemaVersion)")
            }
        }
    }

    /// What a read-only open says of a database of an older layout (it cannot convert it).
    static let olderLayout = "written by an older basket-sync"

    /// The configuration error of a layout that does not match the database.
    static func layoutMismatch(_ directory: String, _ reason: String) -> AgentError {
        .configuration(path: "\(directory)/\(AgentConfiguration.fileName)", line: 1, column: 1, reason: reason)
    }

    /// Every table of layout 3: each row belongs to a cart.
    private static let tables = """
        CREATE TABLE IF NOT EXISTS meta(cart INTEGER NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, PRIMARY KEY(cart, key)) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS outbox(cart INTEGER NOT NULL, seq INTEGER NOT NULL, line BLOB NOT NULL, PRIMARY KEY(cart, seq));
        CREATE TABLE IF NOT EXISTS notifications(cart INTEGER NOT NULL, seq INTEGER NOT NULL, line BLOB NOT NULL, PRIMARY KEY(cart, seq));
        CREATE TABLE IF NOT EXISTS payments(cart INTEGER NOT NULL, seq INTEGER NOT NULL, line BLOB NOT NULL, PRIMARY KEY(cart, seq));
        CREATE TABLE IF NOT EXISTS inbox(cart INTEGER NOT NULL, id TEXT NOT NULL, file TEXT NOT NULL, outcome TEXT NOT NULL, at TEXT NOT NULL, PRIMARY KEY(cart, id));
        CREATE TABLE IF NOT EXISTS reports(n INTEGER PRIMARY KEY, cart INTEGER NOT NULL, at TEXT NOT NULL, level TEXT NOT NULL, message TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS completions(cart INTEGER NOT NULL, order_id TEXT NOT NULL, payment INTEGER NOT NULL, at TEXT NOT NULL, PRIMARY KEY(cart, order_id));
        CREATE TABLE IF NOT EXISTS orders(cart INTEGER NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL, at TEXT NOT NULL, PRIMARY KEY(cart, id));
        CREATE TABLE IF NOT EXISTS transfers(cart INTEGER NOT NULL, id TEXT NOT NULL, at TEXT NOT NULL, PRIMARY KEY(cart, id));
        CREATE TABLE IF NOT EXISTS unfinished(cart INTEGER NOT NULL, order_id TEXT NOT NULL, at TEXT NOT NULL, PRIMARY KEY(cart, order_id));
        CREATE TABLE IF NOT EXISTS settled(cart INTEGER NOT NULL, folder TEXT NOT NULL, name TEXT NOT NULL, at TEXT NOT NULL, PRIMARY KEY(cart, folder, name)) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS pending(cart INTEGER NOT NULL, seq INTEGER NOT NULL, batch BLOB NOT NULL, PRIMARY KEY(cart, seq));
        CREATE TABLE IF NOT EXISTS carts(n INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, sync_id TEXT NOT NULL, made TEXT NOT NULL);
        CREATE INDEX IF NOT EXISTS reports_cart ON reports(cart, n);
        CREATE INDEX IF NOT EXISTS inbox_at ON inbox(cart, at);
        CREATE INDEX IF NOT EXISTS orders_at ON orders(cart, at);
        CREATE INDEX IF NOT EXISTS transfers_at ON transfers(cart, at);
        CREATE INDEX IF NOT EXISTS settled_at ON settled(cart, at);
        """

    /// The tables of layouts 1 and 2, as that version made them (those it did not have yet are
    /// made empty, to be converted like the others).
    private static let tablesBeforeCarts = """
        CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS outbox(seq INTEGER PRIMARY KEY, line BLOB NOT NULL);
        CREATE TABLE IF NOT EXISTS notifications(seq INTEGER PRIMARY KEY, line BLOB NOT NULL);
        CREATE TABLE IF NOT EXISTS payments(seq INTEGER PRIMARY KEY, line BLOB NOT NULL);
        CREATE TABLE IF NOT EXISTS inbox(id TEXT PRIMARY KEY, file TEXT NOT NULL, outcome TEXT NOT NULL, at TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS reports(n INTEGER PRIMARY KEY, at TEXT NOT NULL, level TEXT NOT NULL, message TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS completions(order_id TEXT PRIMARY KEY, payment INTEGER NOT NULL, at TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS orders(id TEXT PRIMARY KEY, seq INTEGER NOT NULL, at TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS transfers(id TEXT PRIMARY KEY, at TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS unfinished(order_id TEXT PRIMARY KEY, at TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS settled(folder TEXT NOT NULL, name TEXT NOT NULL, at TEXT NOT NULL, PRIMARY KEY(folder, name)) WITHOUT ROWID;
        """

    /// Layouts 1 and 2 (one sync directory) become layout 3: every row goes to cart 0, once, in
    /// the caller's transaction. The state's own conversion (1 to 2) follows in ``Store``.
    private func convertToCartRows() throws(AgentError) {
        try connection.execute(Database.tablesBeforeCarts)
        let columns: [(table: String, columns: String)] = [
            ("meta", "key, value"), ("outbox", "seq, line"), ("notifications", "seq, line"), ("payments", "seq, line"),
            ("inbox", "id, file, outcome, at"), ("reports", "n, at, level, message"), ("completions", "order_id, payment, at"),
            ("orders", "id, seq, at"), ("transfers", "id, at"), ("unfinished", "order_id, at"), ("settled", "folder, name, at"),
        ]
        for (table, _) in columns { try connection.execute("ALTER TABLE \(table) RENAME TO \(table)_before_carts") }
        // The old indexes keep their names on the renamed tables: they go with them.
        for index in ["inbox_at", "orders_at", "transfers_at", "settled_at"] { try connection.execute("DROP INDEX IF EXISTS \(index)") }
        try connection.execute(Database.tables)
        for (table, names) in columns {
            try connection.execute("INSERT INTO \(table)(cart, \(names)) SELECT 0, \(names) FROM \(table)_before_carts; DROP TABLE \(table)_before_carts")
        }
        // Marks the rows converted; Store brings the state itself up (layout 1 kept ids in it).
        let layout = try connection.scalar("PRAGMA user_version") ?? 0
        try connection.execute("INSERT INTO meta(cart, key, value) VALUES(0, 'layoutBeforeCarts', CAST('\(layout)' AS BLOB))")
        try connection.execute("PRAGMA user_version=\(Database.schemaVersion)")
    }

    // MARK: Transactions

    /// Runs `body` in one IMMEDIATE transaction: committed when it returns, rolled back when it throws.
    func withTransaction<T>(_ body: () throws(AgentError) -> T) throws(AgentError) -> T {
        try connection.execute(readOnly ? "BEGIN" : "BEGIN IMMEDIATE")
        // Under the lock: the file this connection writes must still be the database at its path.
        if Posix.linkInfo(databasePath)?.identity.prefix(2) != databaseIdentity.prefix(2) {
            try? connection.execute("ROLLBACK")
            throw .databaseGone(path: databasePath)
        }
        // Its write-ahead log and shared memory too: SQLite deletes them only when the last
        // connection closes, and this one is open. Deleted under it, the commits would go to an
        // unlinked file and be lost at the next start.
        if !readOnly {
            for (index, path) in [databasePath + "-wal", databasePath + "-shm"].enumerated() {
                let now = Posix.linkInfo(path)?.identity.prefix(2)
                if let seen = companionIdentities[index] {
                    if now != seen {
                        try? connection.execute("ROLLBACK")
                        throw .databaseGone(path: path)
                    }
                } else if let now {
                    companionIdentities[index] = now
                }
            }
        }
        do {
            let result = try body()
            try connection.execute("COMMIT")
            return result
        } catch {
            try? connection.execute("ROLLBACK")
            rollbacks += 1
            throw error
        }
    }

    /// Runs `body` inside the caller's transaction under a savepoint: undone alone when it throws
    /// (one input of a group that fails does not undo the others).
    func withSavepoint<T>(_ body: () throws(AgentError) -> T) throws(AgentError) -> T {
        try connection.execute("SAVEPOINT step")
        do {
            let result = try body()
            try connection.execute("RELEASE step")
            return result
        } catch {
            try? connection.execute("ROLLBACK TO step")
            try? connection.execute("RELEASE step")
            rollbacks += 1
            throw error
        }
    }

    /// A prepared statement kept for the life of the connection.
    func cached(_ sql: String) throws(AgentError) -> SQLiteConnection.Statement {
        if let statement = statements[sql] { return statement }
        let statement = try connection.prepare(sql)
        statements[sql] = statement
        return statement
    }

    /// Changes whenever another connection committed (`PRAGMA data_version`).
    func dataVersion() throws(AgentError) -> Int64 {
        let statement = try cached("PRAGMA data_version")
        defer { statement.reset() }
        return try statement.step() ? statement.int64(0) : 0
    }

    // MARK: The carts of a tree

    /// Whether `init --tree` made this database (kept in the tree's own row, cart 0).
    func isTree() throws(AgentError) -> Bool {
        let statement = try cached("SELECT 1 FROM meta WHERE cart = 0 AND key = 'layout' AND value = CAST('tree' AS BLOB)")
        defer { statement.reset() }
        return try statement.step()
    }

    /// Marks the database as a tree's (in the caller's transaction).
    func markTree() throws(AgentError) {
        try connection.execute("INSERT OR REPLACE INTO meta(cart, key, value) VALUES(0, 'layout', CAST('tree' AS BLOB))")
    }

    /// The carts of a tree, by id, with their numbers.
    func carts() throws(AgentError) -> [String: Int64] {
        let statement = try cached("SELECT id, n FROM carts")
        defer { statement.reset() }
        var carts: [String: Int64] = [:]
        while try statement.step() { carts[statement.text(0)] = statement.int64(1) }
        return carts
    }

    /// The number and sync id of cart `id`, if the tree has it.
    func cart(_ id: String) throws(AgentError) -> (number: Int64, syncId: String)? {
        let statement = try cached("SELECT n, sync_id FROM carts WHERE id = ?")
        defer { statement.reset() }
        statement.bind(1, id)
        return try statement.step() ? (statement.int64(0), statement.text(1)) : nil
    }

    /// Adds cart `id` (in the caller's transaction) under a number never used before.
    func addCart(_ id: String, syncId: String, at: Date) throws(AgentError) -> Int64 {
        let statement = try cached("INSERT INTO carts(id, sync_id, made) VALUES(?, ?, ?) RETURNING n")
        defer { statement.reset() }
        statement.bind(1, id)
        statement.bind(2, syncId)
        statement.bind(3, Timestamp.text(at))
        guard try statement.step() else { throw .database(path: databasePath, message: "adding cart \(id) returned no number") }
        return statement.int64(0)
    }

    /// Ends cart `number`: every row of it goes (in the caller's transaction).
    func removeCart(_ number: Int64) throws(AgentError) {
        for table in ["meta", "outbox", "notifications", "payments", "inbox", "reports", "completions", "orders", "transfers", "unfinished", "settled", "pending"] {
            let statement = try cached("DELETE FROM \(table) WHERE cart = ?")
            defer { statement.reset() }
            statement.bind(1, number)
            _ = try statement.step()
        }
        let statement = try cached("DELETE FROM carts WHERE n = ?")
        defer { statement.reset() }
        statement.bind(1, number)
        _ = try statement.step()
    }
}

/// The rows of one cart in the ``Database``: its library state, every record of the three
/// projections, the inbox ids already taken, and the reports. The single source of truth of the
/// cart's files.
final class Store {
    /// The sync directory (in a tree: the cart's directory).
    let directory: String
    /// `.basket-sync/` of the sync directory or of the tree.
    var stateDirectory: String { database.stateDirectory }
    /// The database file.
    var databasePath: String { database.databasePath }
    let database: Database
    /// The cart's number: 0 in a single sync directory.
    let cart: Int64
    /// The file touched after a commit, so that a running agent wakes without polling.
    let signalPath: String
    private var connection: SQLiteConnection { database.connection }
    private var cachedState: SyncState?
    private var cachedDataVersion: Int64 = -1
    private var cachedRollbacks = -1
    /// Inside ``withStateSavedOnce(_:)``: the state the group's steps saved so far, written once
    /// at the group's end (nil until a step saved one).
    private var unsavedState: SyncState?
    private var defersState = false

    static let stateDirectoryName = ".basket-sync"
    static let databaseName = "state.db"
    /// Touched by a process after it commits, so that a running agent wakes without polling.
    static let commitSignalName = "committed"

    /// Opens the database of a single sync directory (cart 0), creating `.basket-sync/` (0700)
    /// and the schema when `create` is set. `readOnly` opens it for reading only (`status`).
    convenience init(directory: String, create: Bool, readOnly: Bool = false, busyTimeoutMilliseconds: Int32 = 15_000) throws(AgentError) {
        let database: Database
        do {
            database = try Database(directory: directory, create: create, readOnly: readOnly, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
        } catch {
            // A reader (status, wait) of a database an older version wrote: converted once by a
            // writer's open where the directory allows it, then read.
            guard readOnly, case let .database(_, message) = error, message.hasPrefix(Database.olderLayout), Posix.unwritable(directory) == nil else { throw error }
            _ = try Store(directory: directory, create: false)
            database = try Database(directory: directory, create: create, readOnly: readOnly, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
        }
        self.init(database: database, cart: 0, directory: directory, signalPath: "\(database.stateDirectory)/\(Store.commitSignalName)")
        if readOnly {
            if try database.withTransaction({ () throws(AgentError) in try database.isTree() }) {
                // A configuration that does not parse is its own error, with its place.
                _ = try AgentConfiguration.loadFile(directory: directory)
                throw Database.layoutMismatch(directory, "the database is a tree's (basket-sync init --tree made it), but \"layout\" is not \"tree\" here; put \"layout\": \"tree\" back")
            }
            return
        }
        try withTransaction { () throws(AgentError) in
            if try database.isTree() {
                _ = try AgentConfiguration.loadFile(directory: directory)
                throw Database.layoutMismatch(directory, "the database is a tree's (basket-sync init --tree made it), but \"layout\" is not \"tree\" here; put \"layout\": \"tree\" back")
            }
            // A layout before 3 is brought up once: the ids its state carried move to their
            // tables (saveState moves them), the files already set aside are known to
            // retention by their age.
            if try metaBlob("layoutBeforeCarts") != nil {
                if try metaBlob("state") != nil { try saveState(try loadState()) }
                for folder in ["cur", "bad"] {
                    let path = "\(directory)/inbox/\(folder)"
                    // Read without following a link: a folder that is one is none of basket-sync's.
                    for name in (try? Posix.entries(of: path)) ?? [] where !(folder == "bad" && name.hasSuffix(".error")) {
                        let modified = Posix.linkInfo("\(path)/\(name)")?.modified ?? 0
                        try recordSettled(folder: folder, name: name, at: Date(timeIntervalSince1970: Double(modified) / 1e9))
                    }
                }
                try deleteMeta("layoutBeforeCarts")
            }
            if create, try self.metaBlob("state") == nil {
                try self.saveState(SyncState(syncId: Store.newSyncId()))
            }
        }
    }

    /// One cart's rows in `database` (nothing is read yet).
    init(database: Database, cart: Int64, directory: String, signalPath: String) {
        self.database = database
        self.cart = cart
        self.directory = directory
        self.signalPath = signalPath
    }

    /// Whether the cart has a state yet.
    func hasState() throws(AgentError) -> Bool { try metaBlob("state") != nil }

    /// A random id for a new sync directory, used in outbox record ids.
    static func newSyncId() -> String {
        var generator = SystemRandomNumberGenerator()
        let value = generator.next() as UInt64
        let hex = String(value, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    // MARK: Transactions

    /// Runs `body` in one IMMEDIATE transaction: committed when it returns, rolled back when it
    /// throws. A sync directory gone from under it is told apart from its database gone.
    func withTransaction<T>(_ body: () throws(AgentError) -> T) throws(AgentError) -> T {
        do {
            return try database.withTransaction(body)
        } catch {
            if case .databaseGone = error, cart == 0, !Posix.isDirectory(stateDirectory) { throw .directoryGone(path: directory) }
            throw error
        }
    }

    /// Runs `body` inside the caller's transaction under a savepoint: undone alone when it throws
    /// (one input of a group that fails does not undo the others).
    func withSavepoint<T>(_ body: () throws(AgentError) -> T) throws(AgentError) -> T {
        // A step undone takes back the state it saved, like its rows.
        let before = unsavedState
        do { return try database.withSavepoint(body) } catch {
            unsavedState = before
            throw error
        }
    }

    /// Runs `body` (the steps of a group, inside the caller's transaction) with the state each
    /// step saves kept in memory, then writes the last one once: a group of many events encodes
    /// the state, diffs its pending batches and writes its rows once, not once per event.
    func withStateSavedOnce<T>(_ body: () throws(AgentError) -> T) throws(AgentError) -> T {
        defersState = true
        unsavedState = nil
        defer {
            defersState = false
            unsavedState = nil
        }
        do {
            let result = try body()
            defersState = false
            if let state = unsavedState { try saveState(state) }
            return result
        } catch {
            cachedState = nil
            throw error
        }
    }

    // MARK: State

    private func metaBlob(_ key: String) throws(AgentError) -> [UInt8]? {
        let statement = try cached("SELECT value FROM meta WHERE cart = ? AND key = ?")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, key)
        return try statement.step() ? statement.blob(0) : nil
    }

    private func deleteMeta(_ key: String) throws(AgentError) {
        let statement = try cached("DELETE FROM meta WHERE cart = ? AND key = ?")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, key)
        _ = try statement.step()
    }

    private func setMeta(_ key: String, _ value: [UInt8]) throws(AgentError) {
        // One B-tree (WITHOUT ROWID) updated in place: the state costs one page a commit, not three.
        let statement = try cached("INSERT INTO meta(cart, key, value) VALUES(?, ?, ?) ON CONFLICT(cart, key) DO UPDATE SET value = excluded.value")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, key)
        statement.bind(3, value)
        _ = try statement.step()
    }

    /// A small text kept beside the state (what `status` tells of the last cart, the last good
    /// pass, counts the library does not keep); nil when never set.
    func note(_ key: String) throws(AgentError) -> String? {
        try metaBlob("note." + key).map { String(decoding: $0, as: UTF8.self) }
    }

    /// Sets a note (inside the caller's transaction).
    func setNote(_ key: String, _ text: String) throws(AgentError) {
        try setMeta("note." + key, Array(text.utf8))
    }

    /// A prepared statement kept for the life of the connection.
    private func cached(_ sql: String) throws(AgentError) -> SQLiteConnection.Statement { try database.cached(sql) }

    /// The library state, read again only when another process committed since (`data_version`).
    /// Its `recordedOrders` and `landedTransfers` are empty: those ids live in tables (see
    /// ``orderSeq(_:)``, ``transferLanded(_:)``); the host cart is kept beside it.
    func loadState() throws(AgentError) -> SyncState {
        if defersState, let unsavedState { return unsavedState }
        let version = try database.dataVersion()
        if let cachedState, version == cachedDataVersion, database.rollbacks == cachedRollbacks { return cachedState }
        guard let blob = try metaBlob("state") else {
            throw .database(path: stateDirectory, message: "the database has no state; run basket-sync init again")
        }
        let hostCart = try metaBlob("hostCart")
        // The pending batches are rows of their own once a state was saved by this version.
        var rows: [[UInt8]]?
        if try metaBlob("pendingRows") != nil {
            let statement = try cached("SELECT batch FROM pending WHERE cart = ? ORDER BY seq")
            defer { statement.reset() }
            statement.bind(1, cart)
            rows = []
            while try statement.step() { rows!.append(statement.blob(0)) }
        }
        do throws(JSONProblem) {
            var state = try StateFormat.decode(blob)
            if let rows {
                state.pending = []
                for row in rows { state.pending.append(try StateFormat.decodeBatch(row)) }
                savedPending = state.pending
            } else {
                savedPending = nil
            }
            // A state written before schema 2 carries the cart (and the ids) itself.
            if let hostCart {
                state.hostCart = try StateFormat.decodeQuantities(hostCart)
                savedHostCart = .some(state.hostCart)
            } else {
                savedHostCart = nil
            }
            cachedState = state
            cachedDataVersion = version
            cachedRollbacks = database.rollbacks
            return state
        } catch {
            throw .database(path: stateDirectory, message: "the saved state cannot be read (offset \(error.offset): \(error.reason)); restore .basket-sync/ from a backup")
        }
    }

    /// The next pending-window deadline of the state as saved (from the state itself when it was
    /// saved before the deadline was kept beside it).
    func nextDeadline() throws(AgentError) -> Date? {
        if let cachedState, cachedRollbacks == database.rollbacks, try database.dataVersion() == cachedDataVersion {
            return SyncStateMachine(state: cachedState).nextDeadline
        }
        guard let kept = try metaBlob("deadline") else { return SyncStateMachine(state: try loadState()).nextDeadline }
        // To the nanosecond, rounded up: a wake-up at it finds the window over (the machine decides).
        return Int64(String(decoding: kept, as: UTF8.self)).map { Date(timeIntervalSince1970: Double($0) / 1e9) }
    }

    /// The pending batches as saved in their table, in seq order; nil when not known to be saved there.
    private var savedPending: [PendingBatch]?

    /// Saves the pending batches as rows of their own, writing only those that changed (a host
    /// that does not acknowledge makes them many: a step writes what it changed, and compares
    /// the rest in one walk of two lists in seq order).
    private func savePending(_ batches: [PendingBatch]) throws(AgentError) {
        let saved: [PendingBatch]
        if let known = savedPending, cachedRollbacks == database.rollbacks {
            saved = known
        } else {
            let all = try cached("DELETE FROM pending WHERE cart = ?")
            defer { all.reset() }
            all.bind(1, cart)
            _ = try all.step()
            if try metaBlob("pendingRows") == nil { try setMeta("pendingRows", Array("1".utf8)) }
            saved = []
        }
        func write(_ batch: PendingBatch) throws(AgentError) {
            let insert = try cached("INSERT OR REPLACE INTO pending(cart, seq, batch) VALUES(?, ?, ?)")
            defer { insert.reset() }
            insert.bind(1, cart)
            insert.bind(2, Int64(batch.seq))
            insert.bind(3, StateFormat.encode(batch))
            _ = try insert.step()
        }
        func remove(_ seq: UInt64) throws(AgentError) {
            let delete = try cached("DELETE FROM pending WHERE cart = ? AND seq = ?")
            defer { delete.reset() }
            delete.bind(1, cart)
            delete.bind(2, Int64(seq))
            _ = try delete.step()
        }
        // Both in seq order (the machine keeps its batches so; a list that is not is written whole).
        guard zip(batches, batches.dropFirst()).allSatisfy({ $0.seq < $1.seq }) else {
            for batch in saved { try remove(batch.seq) }
            for batch in batches { try write(batch) }
            savedPending = batches
            return
        }
        var old = saved.startIndex, new = batches.startIndex
        while old < saved.endIndex || new < batches.endIndex {
            if new == batches.endIndex || (old < saved.endIndex && saved[old].seq < batches[new].seq) {
                try remove(saved[old].seq)
                old += 1
            } else if old == saved.endIndex || batches[new].seq < saved[old].seq {
                try write(batches[new])
                new += 1
            } else {
                if saved[old] != batches[new] { try write(batches[new]) }
                old += 1
                new += 1
            }
        }
        savedPending = batches
    }

    /// The host cart as saved beside the state, to write it again only when it changed; nil
    /// when not known to be saved there.
    private var savedHostCart: [ExactID: Int]??

    /// Saves the state: ids of orders and transfers it holds go to their tables (kept), the host
    /// cart is written only when it changed, the rest — bounded by the cart's Mealz lines and the
    /// pending batches — as one blob.
    /// `hostCartChanged` is what the caller knows from comparing with the state it loaded (nil:
    /// compared here).
    func saveState(_ state: SyncState, hostCartChanged: Bool? = nil) throws(AgentError) {
        let at = Timestamp.text(Date())
        for (order, seq) in state.recordedOrders { try recordOrder(order.string, seq: seq, at: at) }
        for transfer in state.landedTransfers { try recordTransfer(transfer.string, at: at) }
        var blob = state
        blob.recordedOrders = [:]
        blob.landedTransfers = []
        if defersState {
            // Written once at the group's end (its cart compared with the saved one then).
            unsavedState = blob
            return
        }
        blob.hostCart = nil
        try savePending(state.pending)
        blob.pending = []
        if savedHostCart == nil || cachedRollbacks != database.rollbacks || (hostCartChanged ?? (savedHostCart! != state.hostCart)) {
            try setMeta("hostCart", state.hostCart.map(StateFormat.encodeQuantities) ?? Array("null".utf8))
        }
        try setMeta("state", StateFormat.encode(blob))
        // Beside it, the next deadline: read without decoding the state (a start over many carts).
        let deadline = SyncStateMachine(state: state).nextDeadline
        try setMeta("deadline", Array((deadline.map { String(Int64(($0.timeIntervalSince1970 * 1e9).rounded(.up))) } ?? "").utf8))
        blob.hostCart = state.hostCart
        blob.pending = state.pending
        cachedState = blob
        savedHostCart = .some(state.hostCart)
        cachedDataVersion = try database.dataVersion()
        cachedRollbacks = database.rollbacks
    }

    // MARK: Ids kept for deduplication

    /// The payment seq `handlePayment` recorded for an order, if it did (and retention kept it).
    func orderSeq(_ orderId: String) throws(AgentError) -> UInt64? {
        let statement = try cached("SELECT seq FROM orders WHERE cart = ? AND id = ?")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, orderId)
        return try statement.step() ? UInt64(statement.int64(0)) : nil
    }

    private func recordOrder(_ orderId: String, seq: UInt64, at: String) throws(AgentError) {
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

    private func recordTransfer(_ transferId: String, at: String) throws(AgentError) {
        let statement = try cached("INSERT OR IGNORE INTO transfers(cart, id, at) VALUES(?, ?, ?)")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, transferId)
        statement.bind(3, at)
        _ = try statement.step()
    }

    /// Remembers that a file was moved to `inbox/cur/` or `inbox/bad/`, for retention.
    func recordSettled(folder: String, name: String, at: Date) throws(AgentError) {
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
    func cartAtBatch() throws(AgentError) -> (identity: [Int64]?, seq: UInt64)? {
        guard let blob = try metaBlob("cartAtBatch") else { return nil }
        let numbers = String(decoding: blob, as: UTF8.self).split(separator: " ").compactMap { Int64($0) }
        guard let seq = numbers.first, seq > 0 else { return nil }
        return (numbers.count > 1 ? Array(numbers.dropFirst()) : nil, UInt64(seq))
    }

    func setCartAtBatch(identity: [Int64]?, seq: UInt64) throws(AgentError) {
        let text = ([Int64(seq)] + (identity ?? [])).map(String.init).joined(separator: " ")
        try setMeta("cartAtBatch", Array(text.utf8))
    }

    // MARK: What the JSON Lines files were given

    /// What a JSON Lines file was given, as last remembered.
    func given(_ projection: Projection) throws(AgentError) -> JSONLinesFile.Given? {
        guard let blob = try metaBlob("given.\(projection.rawValue)") else { return nil }
        let numbers = String(decoding: blob, as: UTF8.self).split(separator: " ").compactMap { UInt64($0) }
        guard numbers.count == 4 else { return nil }
        return JSONLinesFile.Given(device: numbers[0], inode: numbers[1], size: Int64(numbers[2]), seq: numbers[3])
    }

    /// Remembers, inside the caller's transaction (`init --adopt`), that the file was given every
    /// record through `seq`, as no file in particular: the next catch-up reads the file's end (a
    /// torn tail is cut), and a file that no longer holds them (rotated away) starts after them.
    func adoptGiven(_ projection: Projection, seq: UInt64) throws(AgentError) {
        try setMeta("given.\(projection.rawValue)", Array("0 0 0 \(seq)".utf8))
    }

    /// Remembers what a file was given. Written without its own fsync (`synchronous=NORMAL`): the
    /// next commit makes it durable; a crash before loses only this note, and the file's own last
    /// record line says the same.
    func setGiven(_ projection: Projection, _ given: JSONLinesFile.Given) throws(AgentError) {
        try connection.execute("PRAGMA synchronous=NORMAL")
        defer { try? connection.execute("PRAGMA synchronous=FULL") }
        try withTransaction { () throws(AgentError) in
            try setMeta("given.\(projection.rawValue)", Array("\(given.device) \(given.inode) \(given.size) \(given.seq)".utf8))
        }
    }

    // MARK: Records

    /// Takes a record line from a file into the database (`init --adopt`); a seq already there is kept.
    func adopt(_ projection: Projection, seq: UInt64, line: [UInt8]) throws(AgentError) {
        try insert(projection, seq: seq, line: line, keepingExisting: true)
    }

    /// Stores one record's line.
    func insert(_ projection: Projection, seq: UInt64, line: [UInt8], keepingExisting: Bool = false) throws(AgentError) {
        let statement = try cached("INSERT \(keepingExisting ? "OR IGNORE " : "")INTO \(projection.rawValue)(cart, seq, line) VALUES(?, ?, ?)")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, Int64(seq))
        statement.bind(3, line)
        _ = try statement.step()
    }

    /// The lines of a projection after `seq`, in order, with their seq.
    func lines(_ projection: Projection, after seq: UInt64) throws(AgentError) -> [(seq: UInt64, line: [UInt8])] {
        let statement = try cached("SELECT seq, line FROM \(projection.rawValue) WHERE cart = ? AND seq > ? ORDER BY seq")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, Int64(seq))
        var result: [(seq: UInt64, line: [UInt8])] = []
        while try statement.step() { result.append((UInt64(statement.int64(0)), statement.blob(1))) }
        return result
    }

    /// The line stored for one seq, with its newline; nil when there is none.
    func line(_ projection: Projection, seq: UInt64) throws(AgentError) -> [UInt8]? {
        let statement = try cached("SELECT line FROM \(projection.rawValue) WHERE cart = ? AND seq = ?")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, Int64(bitPattern: seq))
        return try statement.step() ? statement.blob(0) : nil
    }

    /// The highest seq stored for a projection (0 when none).
    func lastSeq(_ projection: Projection) throws(AgentError) -> UInt64 {
        let statement = try cached("SELECT COALESCE(MAX(seq), 0) FROM \(projection.rawValue) WHERE cart = ?")
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
    /// those of orders whose completion never finished, found here).
    func removeRecords(
        _ projection: Projection, below bound: UInt64, keeping: Set<UInt64> = [], limit: Int,
        removable: (UInt64, [UInt8]) -> Bool
    ) throws(AgentError) -> Int {
        let unfinished = projection == .payments ? " AND seq NOT IN (SELECT seq FROM orders WHERE cart = ?1 AND id IN (SELECT order_id FROM unfinished WHERE cart = ?1))" : ""
        let select = try cached("SELECT seq, line FROM \(projection.rawValue) WHERE cart = ?1 AND seq < ?2\(unfinished) ORDER BY seq LIMIT ?3")
        defer { select.reset() }
        select.bind(1, cart)
        select.bind(2, Int64(bound))
        select.bind(3, Int64(limit + keeping.count))
        var removed: [Int64] = []
        while try select.step(), removed.count < limit {
            let seq = select.int64(0)
            if keeping.contains(UInt64(seq)) { continue }
            guard removable(UInt64(seq), select.blob(1)) else { break }
            removed.append(seq)
        }
        select.reset()
        let delete = try cached("DELETE FROM \(projection.rawValue) WHERE cart = ? AND seq = ?")
        for seq in removed {
            delete.bind(1, cart)
            delete.bind(2, seq)
            _ = try delete.step()
            delete.reset()
        }
        return removed.count
    }

    /// Forgets up to `limit` ids of each kind (inbox events, transfers, orders and their
    /// completions) recorded before `cutoff`.
    func forgetIds(olderThan cutoff: String, limit: Int) throws(AgentError) -> (count: Int, more: Bool) {
        var count = 0
        var more = false
        for (table, keep) in [("inbox", ""), ("transfers", ""), ("orders", " AND id NOT IN (SELECT order_id FROM unfinished WHERE cart = ?1)"), ("completions", "")] {
            // An order whose completion never finished is kept: its retry must find it.
            let statement = try cached("DELETE FROM \(table) WHERE rowid IN (SELECT rowid FROM \(table) WHERE cart = ?1 AND at < ?2\(keep) ORDER BY at LIMIT ?3)")
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
    func settledFiles(olderThan cutoff: String, limit: Int) throws(AgentError) -> [(folder: String, name: String)] {
        let statement = try cached("SELECT folder, name FROM settled WHERE cart = ? AND at < ? ORDER BY at LIMIT ?")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, cutoff)
        statement.bind(3, Int64(limit))
        var files: [(folder: String, name: String)] = []
        while try statement.step() { files.append((statement.text(0), statement.text(1))) }
        return files
    }

    /// Forgets files retention removed.
    func forgetSettled(_ files: [(folder: String, name: String)]) throws(AgentError) {
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
        let statement = try cached("INSERT \(unlessKnown ? "OR IGNORE " : "")INTO inbox(cart, id, file, outcome, at) VALUES(?, ?, ?, ?, ?)")
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

    // MARK: Locks

    /// Opens `name` in the state directory and waits for its exclusive lock; closing the
    /// descriptor releases it (so does the process dying).
    func lock(_ name: String) throws(AgentError) -> Int32 {
        let path = "\(stateDirectory)/\(name)"
        let fd: Int32
        do { fd = try Posix.open(path, [.readWrite, .create], mode: 0o600) } catch { throw .system(error) }
        // A tree's carts share the file: each locks the byte of its number.
        do { _ = try cart == 0 ? Posix.lockExclusive(fd, path: path) : Posix.lockByte(fd, at: cart, wait: true, path: path) } catch {
            Posix.close(fd)
            throw .system(error)
        }
        return fd
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

    /// Records that the completion for `orderId` (payment `payment`) exited 0: it never runs again.
    func recordCompletion(orderId: String, payment: UInt64, at: Date) throws(AgentError) {
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
        statement.bind(4, message)
        _ = try statement.step()
        // The last 1,000 of the cart are kept.
        let trim = try cached("DELETE FROM reports WHERE cart = ?1 AND n <= (SELECT n FROM reports WHERE cart = ?1 ORDER BY n DESC LIMIT 1 OFFSET 1000)")
        defer { trim.reset() }
        trim.bind(1, cart)
        _ = try trim.step()
    }

    /// The latest reports, newest first.
    func reports(limit: Int, level: String? = nil) throws(AgentError) -> [(at: String, level: String, message: String)] {
        let filter = level == nil ? "" : " AND level = ?"
        let statement = try connection.prepare("SELECT at, level, message FROM reports WHERE cart = ?\(filter) ORDER BY n DESC LIMIT \(limit)")
        statement.bind(1, cart)
        if let level { statement.bind(2, level) }
        var result: [(at: String, level: String, message: String)] = []
        while try statement.step() { result.append((statement.text(0), statement.text(1), statement.text(2))) }
        return result
    }

    // MARK: Waking the agent

    /// Tells a running agent that this process committed: closing a written file in
    /// `.basket-sync/` is an inotify event it watches for.
    func signalCommit() {
        Posix.touch(signalPath, mode: 0o600)
    }
}
