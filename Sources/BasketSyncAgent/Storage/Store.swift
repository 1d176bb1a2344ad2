import BasketSync
import BasketSyncWire

/// cart's files.
package final class Store {
    /// The sync directory, where its files are reached (in a tree: the cart's folder as
    /// opened, `/proc/self/fd/N/.`, once ``pinned()``).
    let directory: String
    /// The cart's folder held open, in a tree, once ``pinned()``.
    let folder: CartFolder?
    /// The sync directory as people know it, for messages.
    var shownDirectory: String { folder?.shown ?? directory }
    /// `.basket-sync/` of the sync directory or of the tree.
    var stateDirectory: String { database.stateDirectory }
    /// The database file.
    var databasePath: String { database.databasePath }
    let database: Database
    /// The cart's number: 0 in a single sync directory.
    let cart: Int64
    /// The file touched after a commit, so that a running agent wakes without polling.
    let signalPath: String
    var connection: SQLiteConnection { database.connection }
    private var cachedState: SyncState? {
        get { cachedStateHeld?.value }
        set { cachedStateHeld = newValue.map(Held.init) }
    }
    private var cachedDataVersion: Int64 = -1
    private var cachedRollbacks = -1
    /// Inside ``withStateSavedOnce(_:)``: the state the group's steps saved so far, written once
    /// at the group's end (nil until a step saved one).
    private var unsavedState: SyncState? {
        get { unsavedStateHeld?.value }
        set { unsavedStateHeld = newValue.map(Held.init) }
    }
    /// The two states above, held out of line: a store is kept for each of thousands of carts,
    /// and a state inline is hundreds of bytes each.
    private final class Held<Value> {
        let value: Value
        init(_ value: Value) { self.value = value }
    }
    private var cachedStateHeld: Held<SyncState>?
    private var unsavedStateHeld: Held<SyncState>?
    private var defersState = false
    /// Reports this store writes before it trims the cart's to the last 1,000 (see ``report(level:message:at:)``).
    var reportsUntilTrim = 0
    /// Counts the states this store was given or read: a step's machine leaves what it knows of
    /// the state for the next step, good while this has not moved since its own save.
    private(set) var stateGeneration = 0
    /// Inside a group: the group's state is with a step (``takeState()``) and not given back yet.
    private var stateLent = false
    /// Inside a group's savepoint: what the step that took the state kept to undo its pending
    /// batches (given back with the state), when it took one.
    private var stepPendingUndo: SyncStateMachine.PendingUndo?


    /// Opens the database of a single sync directory (cart 0), creating `.basket-sync/` (0700)
    /// and the schema when `create` is set. `readOnly` opens it for reading only (`status`).
    convenience init(directory: String, create: Bool, readOnly: Bool = false, rebinding: Bool? = nil, busyTimeoutMilliseconds: Int32 = 15_000) throws(AgentError) {
        let database: Database
        do {
            database = try Database(directory: directory, create: create, readOnly: readOnly, rebinding: rebinding ?? false, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
        } catch {
            // A reader (status, wait) of a database an older version wrote: converted once by a
            // writer's open where the directory allows it, then read.
            guard readOnly, case let .database(_, message) = error, message.hasPrefix(Database.olderLayout), Posix.unwritable(directory) == nil else { throw error }
            _ = try Store(directory: directory, create: false)
            database = try Database(directory: directory, create: create, readOnly: readOnly, rebinding: rebinding ?? false, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
        }
        self.init(database: database, cart: 0, directory: directory, signalPath: database.commitSignalPath)
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
            if try metaBlob(.layoutBeforeCarts) != nil {
                if try metaBlob(.state) != nil { try saveState(try loadState()) }
                for folder in ["cur", "bad"] {
                    let path = "\(directory)/inbox/\(folder)"
                    // Read without following a link: a folder that is one is none of basket-sync's.
                    for name in (try? Posix.entries(of: path)) ?? [] where folder == "cur" || Inbox.isSetAside(name) {
                        let modified = Posix.info("\(path)/\(name)", follow: false)?.modified ?? 0
                        try recordFiled(folder: folder, name: name, at: Date(timeIntervalSince1970: Double(modified) / 1e9))
                    }
                }
                try deleteMeta(.layoutBeforeCarts)
            }
            if create, try self.metaBlob(.state) == nil {
                try self.saveState(SyncState(syncId: Store.newSyncId()))
            }
        }
    }

    /// One cart's rows in `database` (nothing is read yet); its files reached in `directory`,
    /// or in `folder` when given.
    init(database: Database, cart: Int64, directory: String, signalPath: String, folder: CartFolder? = nil) {
        self.database = database
        self.cart = cart
        self.directory = folder?.path ?? directory
        self.folder = folder
        self.signalPath = folder.map { "\($0.path)/\(Layout.cartMarker)" } ?? signalPath
    }

    /// The same cart's rows without its folder held open: what the agent keeps for each of
    /// thousands of carts (their engines pin the folder again, ``pinned()``).
    var unpinned: Store {
        guard let folder else { return self }
        return Store(database: database, cart: cart, directory: folder.shown, signalPath: "")
    }

    /// The same cart with its files reached through its folder opened once without following a
    /// link (docs/spec.md §7): a tree's cart, whose folder its owner may swap for a link. A sync
    /// directory's cart, or one pinned already, is itself.
    func pinned() throws(AgentError) -> Store {
        guard cart != 0, folder == nil else { return self }
        do { return Store(database: database, cart: cart, directory: directory, signalPath: signalPath, folder: try CartFolder(directory)) } catch {
            throw .system(error)
        }
    }

    /// Whether the cart has a state yet.
    func hasState() throws(AgentError) -> Bool { try metaBlob(.state) != nil }

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
    package func withTransaction<T>(_ body: () throws(AgentError) -> T) throws(AgentError) -> T {
        do {
            return try database.withTransaction(body)
        } catch {
            // The sync directory or its `.basket-sync/` gone (not a `"database"` directory elsewhere: that is the database gone, named).
            if case .databaseGone = error, cart == 0, !Posix.isDirectory(database.markerDirectory) { throw .directoryGone(path: directory) }
            throw error
        }
    }

    /// Runs `body` inside the caller's transaction under a savepoint: undone alone when it throws
    /// (one input of a group that fails does not undo the others).
    ///
    /// A step undone takes back the state it saved, like its rows: from the state before it
    /// without its pending batches, and the undo of them the step gave back with its state
    /// (``giveBack(_:undo:)``) — not from a copy of them, which the step's first append would
    /// copy whole (a queue of n events: n² batch copies). A step that keeps the state it took
    /// cannot be undone alone: its whole transaction fails (`.database`).
    func withSavepoint<T>(_ body: () throws(AgentError) -> T) throws(AgentError) -> T {
        var before = unsavedState
        let count = before?.pending.count ?? 0
        before?.pending = []
        stepPendingUndo = nil
        defer { stepPendingUndo = nil }
        do { return try database.withSavepoint(body) } catch {
            // No state saved before the step: none after it either.
            guard var undone = before else {
                (unsavedState, stateLent) = (nil, false)
                throw error
            }
            guard !stateLent, let now = unsavedState?.pending else {
                stateLent = false
                unsavedState = nil
                throw .database(path: stateDirectory, message: "a step of a group kept the state it took, so it cannot be undone alone (\(error.description)); the group's transaction is taken back whole")
            }
            undone.pending = stepPendingUndo.map { $0.undo(now) } ?? Array(now.prefix(count))
            stateGeneration += 1
            unsavedState = undone
            throw error
        }
    }

    /// The state for a step that runs an input: inside a group (``withStateSavedOnce(_:)``), the
    /// group's state so far, lent to the step, not copied — the step gives it back, changed
    /// (``saveState(_:hostCartChanged:hostCartTouched:undo:)``) or not (``giveBack(_:undo:)``);
    /// otherwise ``loadState()``.
    func takeState() throws(AgentError) -> SyncState {
        let state = try loadState()
        if defersState, unsavedStateHeld != nil {
            unsavedStateHeld = nil
            stateLent = true
        }
        return state
    }

    /// Gives back the state a step took (``takeState()``) without saving it: unchanged, or
    /// undone by its savepoint with `undo` (what the step's machine kept of its pending batches).
    func giveBack(_ state: SyncState, undo: SyncStateMachine.PendingUndo?) {
        guard defersState, stateLent else { return }
        stateGeneration += 1
        unsavedState = Self.withoutIds(state)
        stateLent = false
        stepPendingUndo = undo
    }

    /// A state without the ids of orders and transfers it holds (those live in tables).
    private static func withoutIds(_ state: SyncState) -> SyncState {
        guard !state.recordedOrders.isEmpty || !state.landedTransfers.isEmpty else { return state }
        var blob = state
        blob.recordedOrders = [:]
        blob.landedTransfers = []
        return blob
    }

    /// Runs `body` (the steps of a group, inside the caller's transaction) with the state each
    /// step saves kept in memory, then writes the last one once: a group of many events encodes
    /// the state, diffs its pending batches and writes its rows once, not once per event.
    func withStateSavedOnce<T>(_ body: () throws(AgentError) -> T) throws(AgentError) -> T {
        defersState = true
        unsavedState = nil
        stateLent = false
        defer {
            defersState = false
            unsavedState = nil
            stateLent = false
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

    /// The cart's row `key` (see ``Database/meta(_:_:)``).
    func metaBlob(_ key: MetaKey) throws(AgentError) -> [UInt8]? { try database.meta(cart, key) }

    func deleteMeta(_ key: MetaKey) throws(AgentError) { try database.setMeta(cart, key, nil) }

    func setMeta(_ key: MetaKey, _ value: [UInt8]) throws(AgentError) { try database.setMeta(cart, key, value) }

    /// A note (``Note``); nil when never set.
    func note(_ note: Note) throws(AgentError) -> String? {
        try metaBlob(.note(note)).map { String(decoding: $0, as: UTF8.self) }
    }

    /// Sets a note (inside the caller's transaction).
    func setNote(_ note: Note, _ text: String) throws(AgentError) {
        try setMeta(.note(note), Array(text.utf8))
    }

    /// A prepared statement kept for the life of the connection.
    func cached(_ sql: StaticString) throws(AgentError) -> SQLiteConnection.Statement { try database.cached(sql) }

    /// A prepared statement kept for the life of the connection, naming the projection's table.
    func cached(_ template: StaticString, table projection: Projection) throws(AgentError) -> SQLiteConnection.Statement {
        try database.cached(template, table: projection)
    }

    /// A prepared statement kept for the life of the connection, from SQL built at run time.
    func cached(built sql: String) throws(AgentError) -> SQLiteConnection.Statement { try database.cached(built: sql) }

    /// Whether the cart has pending batches kept as rows (the layout ``MetaKey/pendingRows`` marks).
    func hasPendingRows() throws(AgentError) -> Bool {
        let statement = try cached("SELECT 1 FROM pending WHERE cart = ? LIMIT 1")
        defer { statement.reset() }
        statement.bind(1, cart)
        return try statement.step()
    }

    /// The library state, read again only when another process committed since (`data_version`).
    /// Its `recordedOrders` and `landedTransfers` are empty: those ids live in tables (see
    /// ``orderSeq(_:)``, ``transferLanded(_:)``); the host cart is kept beside it.
    func loadState() throws(AgentError) -> SyncState {
        if defersState, let unsavedState { return unsavedState }
        // The group's state is with a step: the one saved is older (a caller's mistake, said
        // rather than served).
        if defersState, stateLent { throw .database(path: stateDirectory, message: "the state was read while a step of a group held it; the group's transaction is taken back whole") }
        let version = try database.dataVersion()
        if let cachedState, version == cachedDataVersion, database.rollbacks == cachedRollbacks { return cachedState }
        guard let blob = try metaBlob(.state) else {
            // Emptied, or made by hand: init cannot mend it where the files hold records.
            let directory = Posix.dirname(of: database.markerDirectory)
            let held = Integrity.recordsHeld(in: directory)
            throw .database(path: stateDirectory, message: held.isEmpty
                ? "the database has no state; run basket-sync init again"
                : "the database has no state (emptied, or not basket-sync's) while the files hold records (\(held.joined(separator: ", "))): move it aside (mv \(stateDirectory) \(stateDirectory).damaged) and run basket-sync init --adopt to make it again from the files, or restore \(Layout.stateDirectory)/ from a backup")
        }
        stateGeneration += 1
        let hostCart = try metaBlob(.hostCart)
        let hostCartChanges = try metaBlob(.hostCartChanges)
        // The pending batches are rows of their own once a state was saved by this version.
        var rows: [[UInt8]]?
        if try metaBlob(.pendingRows) != nil {
            let statement = try cached("SELECT batch FROM pending WHERE cart = ? ORDER BY seq")
            defer { statement.reset() }
            statement.bind(1, cart)
            rows = []
            while try statement.step() { rows!.append(statement.blob(0)) }
        }
        // A tree's cart: its values are its own synchronization's — rows moved between carts
        // would serve one shopper's state to another and write its ids into this cart's files.
        let own = cart != 0 ? try database.cartSyncId(cart) : nil
        var foreign: String?
        do throws(JSONProblem) {
            var state = try StateFormat.decode(blob)
            if let own, own != state.syncId { foreign = state.syncId }
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
                let changes = try hostCartChanges.flatMap(StateFormat.decodeQuantities) ?? [:]
                if !changes.isEmpty {
                    var cart = state.hostCart ?? [:]
                    for (id, quantity) in changes { cart[id] = quantity == 0 ? nil : quantity }
                    state.hostCart = cart
                }
                savedHostCart = .some(state.hostCart)
                savedCartChanges = changes
            } else {
                savedHostCart = nil
                savedCartChanges = nil
            }
            savedDeadline = nil
            if foreign == nil {
                cachedState = state
                cachedDataVersion = version
                cachedRollbacks = database.rollbacks
                return state
            }
        } catch {
            throw database.damaged(cart, "saved state cannot be read (offset \(error.offset): \(error.reason))")
        }
        throw database.damaged(cart, "kept values are another synchronization's (sync id \(foreign ?? ""), the cart's is \(own ?? ""))")
    }

    /// The next pending-window deadline of the state as saved (from the state itself when it was
    /// saved before the deadline was kept beside it).
    func nextDeadline() throws(AgentError) -> Date? {
        if let cachedState, cachedRollbacks == database.rollbacks, try database.dataVersion() == cachedDataVersion {
            return SyncStateMachine(state: cachedState).nextDeadline
        }
        guard let kept = try metaBlob(.deadline) else { return SyncStateMachine(state: try loadState()).nextDeadline }
        // To the nanosecond, rounded up: a wake-up at it finds the window over (the machine decides).
        return Int64(String(decoding: kept, as: UTF8.self)).map { Date(timeIntervalSince1970: Double($0) / 1e9) }
    }

    /// The pending batches as saved in their table, in seq order; nil when not known to be saved there.
    private var savedPending: [PendingBatch]?

    /// Saves the pending batches as rows of their own, writing only those that changed (a host
    /// that does not acknowledge makes them many: a step writes what it changed, and compares
    /// the rest in one walk of two lists in seq order).
    func savePending(_ batches: [PendingBatch]) throws(AgentError) {
        let saved: [PendingBatch]
        if let known = savedPending, cachedRollbacks == database.rollbacks {
            saved = known
        } else {
            let all = try cached("DELETE FROM pending WHERE cart = ?")
            defer { all.reset() }
            all.bind(1, cart)
            _ = try all.step()
            if try metaBlob(.pendingRows) == nil { try setMeta(.pendingRows, Array("1".utf8)) }
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

    /// How many changes of the host cart are always saved as changes (more: up to an eighth of
    /// the cart), before the whole cart is written again.
    static let fewCartChanges = 256

    /// The host cart as saved beside the state, to write it again only when it changed; nil
    /// when not known to be saved there.
    private var savedHostCart: [ExactID: Int]??
    /// The changes saved beside the host cart (``MetaKey/hostCartChanges``), when known.
    private var savedCartChanges: [ExactID: Int]?
    /// The deadline as saved beside the state (``MetaKey/deadline``) by this store, when known:
    /// written again only when it moves (most changes leave it where it was).
    private var savedDeadline: [UInt8]?

    /// Saves the state: ids of orders and transfers it holds go to their tables (kept), the host
    /// cart is written only when it changed, the rest — bounded by the cart's Mealz lines and the
    /// pending batches — as one blob.
    /// `hostCartChanged` is what the caller knows from comparing with the state it loaded (nil:
    /// compared here); `hostCartTouched`, the ids whose quantity may differ from that state's
    /// (nil: any): the host cart is then saved as its changes while they stay few.
    /// `undo`: inside a group, what the step's machine kept to undo its pending batches
    /// (see ``withSavepoint(_:)``).
    func saveState(_ state: SyncState, hostCartChanged: Bool? = nil, hostCartTouched: [ExactID]? = nil, undo: SyncStateMachine.PendingUndo? = nil) throws(AgentError) {
        stateGeneration += 1
        if !state.recordedOrders.isEmpty || !state.landedTransfers.isEmpty {
            let at = Timestamp.text(Date())
            for (order, seq) in state.recordedOrders { try recordOrder(order.string, seq: seq, at: at) }
            for transfer in state.landedTransfers { try recordTransfer(transfer.string, at: at) }
        }
        if defersState {
            // Written once at the group's end (its cart compared with the saved one then).
            unsavedState = Self.withoutIds(state)
            stateLent = false
            stepPendingUndo = undo
            return
        }
        var blob = state
        blob.recordedOrders = [:]
        blob.landedTransfers = []
        blob.hostCart = nil
        try savePending(state.pending)
        blob.pending = []
        let known = savedHostCart != nil && cachedRollbacks == database.rollbacks
        if !known || (hostCartChanged ?? (savedHostCart! != state.hostCart)) {
            if known, (savedHostCart ?? nil) != nil, let hostCartTouched, let saved = savedCartChanges, let cart = state.hostCart,
               saved.count + hostCartTouched.count <= max(Self.fewCartChanges, cart.count / 8) {
                var changes = saved
                for id in hostCartTouched { changes[id] = cart[id] ?? 0 }
                try setMeta(.hostCartChanges, StateFormat.encodeQuantities(changes))
                savedCartChanges = changes
            } else {
                try setMeta(.hostCart, state.hostCart.map(StateFormat.encodeQuantities) ?? Array("null".utf8))
                if savedCartChanges?.isEmpty != true { try deleteMeta(.hostCartChanges) }
                savedCartChanges = [:]
            }
        }
        try setMeta(.state, StateFormat.encode(blob))
        // Beside it, the next deadline: read without decoding the state (a start over many carts).
        let deadline = SyncStateMachine(state: state).nextDeadline
        let deadlineText = Array((deadline.map { String(Int64(($0.timeIntervalSince1970 * 1e9).rounded(.up))) } ?? "").utf8)
        if !known || savedDeadline != deadlineText { try setMeta(.deadline, deadlineText) }
        savedDeadline = deadlineText
        blob.hostCart = state.hostCart
        blob.pending = state.pending
        cachedState = blob
        savedHostCart = .some(state.hostCart)
        cachedDataVersion = try database.dataVersion()
        cachedRollbacks = database.rollbacks
    }

}

extension Database {
    /// The rows of cart 0: a sync directory's own cart; in a tree, what belongs to the tree as a
    /// whole (its default store, the running agent's note).
    var rootRows: Store { Store(database: self, cart: 0, directory: Posix.dirname(of: markerDirectory), signalPath: "") }

    /// The rows of cart `number` of a tree, for its notes only (no folder reached).
    func rows(cart number: Int64) -> Store { Store(database: self, cart: number, directory: Posix.dirname(of: markerDirectory), signalPath: "") }
}
