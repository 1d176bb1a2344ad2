import BasketSync
import BasketSyncWire

/// A tree of carts: one database at `ROOT/.basket-sync/` for every cart, one directory per cart
/// (docs/spec.md §8). A cart is adopted when first seen: its folders are made, it gets a number and a
/// sync id of its own, and a marker file (`.basket-sync-cart`) holding that sync id, so that a
/// directory removed and made again under the same id is known as a new cart.
final class Tree {
    /// What a cart id is, for messages.
    static let idRule = "1 to 128 of A-Z a-z 0-9 . _ -, not starting with a dot, not \(AgentConfiguration.fileName)"

    /// Whether `name` is a cart id: 1–128 bytes of `[A-Za-z0-9._-]`, not starting with `.`, and
    /// not the name of the root's own configuration (`basket-sync.json`).
    static func isCartId(_ name: String) -> Bool {
        let bytes = name.utf8
        guard (1...128).contains(bytes.count), bytes.first != UInt8(ascii: "."), name != AgentConfiguration.fileName else { return false }
        return bytes.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
        }
    }

    /// The tree's root.
    let root: String

    /// `root` to be opened as the folder it names: the root is the user's to name, through a
    /// link if they like (as a sync directory is); the links under it are never followed.
    static func followed(_ root: String) -> String { root.hasSuffix("/") ? root + "." : root + "/." }
    /// The one database of the tree.
    let database: Database
    /// The settings of every cart.
    let configuration: AgentConfiguration

    /// Opens the tree at `root` (its database must exist: `init --tree` makes it).
    init(root: String, readOnly: Bool = false) throws(AgentError) {
        self.root = root
        configuration = try AgentConfiguration.loadFile(directory: root)
        database = try Database(directory: root, create: false, readOnly: readOnly)
        do {
            try database.withTransaction { () throws(AgentError) in
                guard try database.isTree() else {
                    throw Database.layoutMismatch(root, "\"layout\" says \"tree\" but the database is a single sync directory's; put \"layout\": \"directory\" back, or make the tree elsewhere with basket-sync init --tree")
                }
            }
        }
    }

    /// Makes a tree at `root`: its configuration (`"layout": "tree"`) and its database.
    /// `rebind`: `init --rebind` (see ``Database/init(directory:create:readOnly:rebinding:busyTimeoutMilliseconds:)``).
    static func create(root: String, adopt: Bool = false, rebind: Bool = false) throws(AgentError) -> [String] {
        var created: [String] = []
        // Refused before anything is made.
        if case .treeCart = Workspace.of(root) {
            throw .refused("\(root): is a cart of the tree \(Posix.dirname(of: root)); a tree cannot be made inside a tree")
        }
        if let outer = Workspace.enclosing(root) {
            throw .refused("\(root): is inside \(outer), a sync directory or a tree of carts; make the tree elsewhere")
        }
        if !Posix.isDirectory(root) {
            try Posix.makeDirectoryTree(root)
            created.append(root)
        }
        let configurationPath = "\(root)/\(AgentConfiguration.fileName)"
        if Posix.info(configurationPath, follow: false) != nil {
            // A configuration that does not parse is its own error, with its place.
            guard try AgentConfiguration.loadFile(directory: root).isTree else {
                throw .refused("\(root): already a sync directory of one cart (\(AgentConfiguration.fileName) has no \"layout\": \"tree\"); make the tree in another directory, and move carts into it as subdirectories")
            }
        } else {
            if Posix.info("\(root)/\(Layout.stateDirectory)", follow: false) != nil {
                throw .refused("\(root): holds a database (\(Layout.stateDirectory)/) but no \(AgentConfiguration.fileName); restore the configuration, or make the tree in another directory")
            }
            // A sync directory below would become a cart of the tree, unusable as what it is.
            if let inner = ((try? Posix.entries(of: Tree.followed(root))) ?? []).sorted().first(where: { Posix.info("\(root)/\($0)/\(Layout.stateDirectory)", follow: false)?.kind == .directory }) {
                throw .refused("\(root)/\(inner): is a sync directory of its own; a tree made here would take it for a cart. Make the tree elsewhere")
            }
            var configuration = AgentConfiguration()
            configuration.isTree = true
            do { try Posix.writeFileAtomically(configurationPath, Array(configuration.fileText.utf8)) } catch { throw .system(error) }
            created.append(configurationPath)
        }
        let databasePath = try Database.path(of: root)
        let isNew = !Posix.exists(databasePath)
        if isNew { try Agent.refuseNewDatabaseBesideAnAgent(root) }
        // Carts holding records and no database: it was lost. A new one would know none of them.
        let holding = isNew ? ((try? Posix.entries(of: Tree.followed(root))) ?? []).sorted().filter {
            Tree.isCartId($0) && Posix.info("\(root)/\($0)", follow: false)?.kind == .directory && Tree.refusal(id: $0, root: root) != nil
        } : []
        if !holding.isEmpty, !adopt {
            throw .refused("\(root): its carts hold records (\(holding.prefix(5).joined(separator: ", "))\(holding.count > 5 ? ", …" : "")) but the tree has no database: it was lost. A new one would number their records again from 1. Restore \(root)/\(Layout.stateDirectory)/ from a backup, or run basket-sync -C \(root) init --tree --adopt to make the database and adopt every cart with its records")
        }
        let database = try Database(directory: root, create: true, rebinding: rebind)
        try database.withTransaction { () throws(AgentError) in
            if try !database.isTree() {
                if try database.meta(0, .state) != nil {
                    throw .refused("\(root): its database is a single sync directory's; make the tree in another directory")
                }
                try database.markTree()
            }
        }
        if isNew { created.append(databasePath) }
        return created
    }

    /// The cart directories under the root, by id (subdirectories named as cart ids; links and
    /// other names are not carts).
    func cartDirectories() throws(AgentError) -> [String] {
        let names: [String]
        do { names = try Posix.entries(of: Tree.followed(root)) } catch {
            var error = error
            error.path = root
            throw .system(error)
        }
        return names.filter { Tree.isCartId($0) && Posix.info("\(root)/\($0)", follow: false)?.kind == .directory }.sorted()
    }

    /// The store of cart `id`. A directory seen for the first time (or made again) is adopted:
    /// its folders made, a new cart (number, sync id, marker), the root's default store. With
    /// `create`, a missing directory is made (`push` from the Mealz side comes first). Read-only,
    /// nothing is made: a cart not adopted yet is missing.
    ///
    /// A directory new to the tree that holds records (copied or moved in, its marker lost or
    /// changed) is refused, and any cart the id had is kept: a new cart would number its records
    /// again from 1. `adopting` (`init --adopt`) takes them into the new cart instead.
    func cartStore(_ id: String, create: Bool, readOnly: Bool = false, adopting: ((Store) throws(AgentError) -> Void)? = nil) throws(AgentError) -> Store {
        let shown = "\(root)/\(id)"
        guard Tree.isCartId(id) else {
            throw .usage("\(id): not a cart id (\(Tree.idRule))")
        }
        if Posix.info(shown, follow: false) == nil {
            guard create, !readOnly else {
                // A cart the tree knows whose directory left: kept a while to be put back.
                if let away = awayMessage(id, directory: shown) { throw .missingInput(away) }
                throw .missingInput("\(shown): no cart \(id) in the tree \(root); the host makes it (mkdir, then its cart), or basket-sync -C \(shown) push does")
            }
            do throws(SystemError) { try Posix.makeDirectory(shown, mode: 0o755) } catch { throw .system(error) }
        }
        // Everything in the folder from here on is reached through it as opened now.
        let folder: CartFolder
        do { folder = try CartFolder(shown) } catch { throw .system(error) }
        let directory = folder.path
        let marker = "\(directory)/\(Layout.cartMarker)"
        if Posix.info("\(directory)/\(Layout.stateDirectory)", follow: false) != nil {
            throw .refused("\(shown): holds a sync directory of its own (\(Layout.stateDirectory)/) inside the tree \(root): one agent serves the whole tree. Move it out of the tree, or remove its \(Layout.stateDirectory)/ to make it a cart of the tree")
        }
        let readMarker = { () -> String? in
            (try? Posix.readFile(marker, limit: 64)).flatMap { $0 }.map { String(decoding: $0, as: UTF8.self).trimmingSpaces }
        }
        // A cart known and marked as it: read without the write lock (committed rows and a
        // marker written before their commit say the same under it).
        // Whether it was away (its directory had left the tree) is read in the same look.
        var wasAway = false
        let marked = try database.withReadTransaction { () throws(AgentError) -> (number: Int64, syncId: String)? in
            guard let known = try database.cart(id) else { return nil }
            wasAway = try database.rows(cart: known.number).note(.goneSince) != nil
            return known
        }.flatMap { readMarker() == $0.syncId ? $0 : nil }
        // The marker of another cart of the tree whose own folder no longer holds it (gone, or
        // anything but a folder in its place — a link, a file): that folder moved here (two
        // carts' folders swapped). Refused, `init --adopt` too — it
        // would make that cart's records this id's; a copy (the cart's folder still marked as
        // it) is refused below as any folder holding records, and may be adopted.
        if marked == nil, let named = readMarker(), !named.isEmpty,
           let other = try database.withReadTransaction({ () throws(AgentError) in try database.cartId(syncId: named) }), other != id,
           Tree.markerText(root: root, id: other).map({ $0 != named }) ?? (Posix.info("\(root)/\(other)", follow: false)?.kind != .directory) {
            throw .refused("\(shown): holds the marker of cart \(JSONWriter.quoted(other)) of the tree \(root) — that cart's folder was moved or swapped here. Put the folders back where they were (cart \(JSONWriter.quoted(other))'s under \(root)/\(other)): each cart is served again with its state. Do not run init --adopt here: it would make that cart's records this one's")
        }
        if readOnly {
            guard let marked else {
                // One that holds records would be refused by every command: said as they say it.
                if let refusal = Tree.refusal(folder, root: root) { throw .refused(refusal) }
                throw .missingInput("\(shown): cart \(id) is not adopted yet (the agent adopts it, or any command but status and wait: basket-sync -C \(shown) sync)")
            }
            return Store(database: database, cart: marked.number, directory: shown, signalPath: "", folder: folder)
        }
        let store: Store
        if let marked {
            store = Store(database: database, cart: marked.number, directory: shown, signalPath: "", folder: folder)
        } else {
            store = try database.withTransaction { () throws(AgentError) in
                // Read under the database's lock: a process adopting the cart at the same time wrote
                // the marker before it committed.
                if let known = try database.cart(id), readMarker() == known.syncId {
                    return Store(database: database, cart: known.number, directory: shown, signalPath: "", folder: folder)
                }
                // A directory new to the tree, or made again (no marker, or another cart's). One that
                // holds records is not a new cart: refused before anything changes.
                if adopting == nil, let refusal = Tree.refusal(folder, root: root) { throw .refused(refusal) }
                // The old cart of this id, if any, ends with every row of it.
                if let known = try database.cart(id) { try database.removeCart(known.number) }
                let (store, syncId) = try addCartRows(id, folder: folder, adopting: adopting)
                do throws(SystemError) { try Posix.writeFileAtomically(marker, Array("\(syncId)\n".utf8), replacing: true) } catch { throw .system(error) }
                return store
            }
            // A marker written anew: an agent polling the cart looks at it.
            database.signalCommit()
        }
        // Back in the tree (put back as it was, its marker with it): no longer away.
        if wasAway {
            try database.withTransaction { () throws(AgentError) in try store.deleteMeta(.note(.goneSince)) }
        }
        // The cart is the tree's from here on, whatever its folders: a folder that cannot be made
        // is this cart's error (reported, retried), never a reason to forget it.
        try Tree.makeInbox(store)
        return store
    }

    /// The rows of a new cart `id` (inside the caller's transaction): in the tree's default
    /// store, numbered after what its cart already claims (its records moved away, its marker
    /// lost: a recovery from no record); what it holds taken in — its records with `adopting`,
    /// else the events `cur/` shows taken. Its marker is the caller's to write.
    private func addCartRows(_ id: String, folder: CartFolder, adopting: ((Store) throws(AgentError) -> Void)?) throws(AgentError) -> (Store, String) {
        let directory = folder.path
        let syncId = Store.newSyncId()
        let number = try database.addCart(id, syncId: syncId, at: Date())
        let store = Store(database: database, cart: number, directory: folder.shown, signalPath: "", folder: folder)
        let (storeId, mode) = try defaultStore() ?? (nil, .standalone)
        var machine = SyncStateMachine(state: SyncState(syncId: syncId, storeId: storeId, mode: mode))
        _ = machine.recover(from: RecoveredRecords(cartClaim: Recovery.cartClaim(directory: directory, configuration: configuration)))
        try store.saveState(machine.state)
        if let adopting { try adopting(store) } else { try Recovery.learnTakenEvents(directory: directory, into: store, configuration: configuration) }
        return (store, syncId)
    }

    /// Adopts together the carts among `ids` that are plainly new — unknown to the tree, no
    /// marker, no records, no folder of basket-sync's own — as a first pass over many new carts
    /// meets them: up to 1,024 in one transaction, their markers written without an fsync each
    /// and made durable together (one `syncfs`) before the commit, as ``cartStore(_:create:)``
    /// writes a marker before its commit. Anything else, and any cart that fails here, is left to
    /// ``cartStore(_:create:)``, one by one.
    func adoptNew(_ ids: [String]) {
        guard let known = try? database.withReadTransaction({ () throws(AgentError) in try database.carts() }) else { return }
        let unknown = ids.filter { known[$0] == nil }
        guard unknown.count > 1 else { return }
        // Up to 1,024 carts a commit (one syncfs makes their markers durable), their folders
        // opened 128 at a time at most (fewer when the descriptor limit is low): each part's
        // folders are let go once its markers are written.
        let partSize = max(2, min(128, (Posix.raiseDescriptorLimit() - 32) / 2))
        var start = unknown.startIndex
        while start < unknown.endIndex {
            let slice = unknown[start..<min(start + 1_024, unknown.endIndex)]
            start = slice.endIndex
            var made: [Store] = []
            let adopted: Void? = try? database.withTransaction { () throws(AgentError) in
                made = []
                var next = slice.startIndex
                while next < slice.endIndex {
                    let part = slice[next..<min(next + partSize, slice.endIndex)]
                    next = part.endIndex
                    // Each folder opened once, never through a link: the checks and the marker go through it.
                    let chunk: [(id: String, folder: CartFolder)] = part.compactMap { id in
                        guard let folder = try? CartFolder("\(root)/\(id)") else { return nil }
                        let plain = Posix.info("\(folder.path)/\(Layout.cartMarker)", follow: false) == nil
                            && Posix.info("\(folder.path)/\(Layout.stateDirectory)", follow: false) == nil && Tree.refusal(folder, root: root) == nil
                        return plain ? (id, folder) : nil
                    }
                    for (id, folder) in chunk {
                        let marker = "\(folder.path)/\(Layout.cartMarker)"
                        // Adopted meanwhile by another process, or a marker put there since: one by one.
                        guard try database.cart(id) == nil, Posix.info(marker, follow: false) == nil else { continue }
                        // A cart that fails here (a folder it cannot write in) is undone alone and
                        // left to cartStore, which says why; the others go on.
                        let store: Store? = try? database.withSavepoint { () throws(AgentError) -> Store in
                            let (store, syncId) = try addCartRows(id, folder: folder, adopting: nil)
                            do throws(SystemError) {
                                let fd = try Posix.open(marker, [.writeOnly, .create, .exclusive], mode: Posix.sharedFileMode)
                                defer { Posix.close(fd) }
                                try Posix.writeAll(fd, Array("\(syncId)\n".utf8), at: 0, path: marker)
                            } catch {
                                throw .system(error)
                            }
                            return store
                        }
                        if let store { made.append(store.unpinned) }
                    }
                }
                // Every marker durable before the rows that name them commit.
                if !made.isEmpty {
                    do throws(SystemError) { try Posix.syncFileSystem(of: root) } catch { throw .system(error) }
                }
            }
            // A commit that failed leaves markers its rolled-back rows do not know: they are
            // taken as made again, one by one, by cartStore.
            guard adopted != nil else { continue }
            for store in made { try? Tree.makeInbox(store) }
        }
    }

    /// Why a directory that is not a cart of the tree cannot become a new one: it holds records
    /// (a new cart would number them again from 1); nil when it holds none.
    static func refusal(_ folder: CartFolder, root: String) -> String? {
        let held = Integrity.recordsHeld(in: folder.path)
        guard !held.isEmpty else { return nil }
        let directory = folder.shown
        return "\(directory): holds records (\(held.joined(separator: ", "))) but is not a cart of the tree \(root): copied or moved in, its \(Layout.cartMarker) lost or changed, away from the tree longer than \(AgentConfiguration.number(Tree.awaySeconds)) s (the cart ended then), or the tree's database lost it (restored from an older backup, its WAL deleted); a new cart would number its records again from 1. Restore \(root)/\(Layout.stateDirectory)/ from a backup; or run basket-sync -C \(directory) init --adopt to make it a cart that goes on after its records, or move its .jsonl files away to start it afresh"
    }

    /// ``refusal(_:root:)`` of the folder `ROOT/ID` (opened without following a link; nil when
    /// it cannot be).
    static func refusal(id: String, root: String) -> String? {
        (try? CartFolder("\(root)/\(id)")).flatMap { refusal($0, root: root) }
    }

    /// Makes a cart's inbox folders in its folder as pinned, never through a link (an inbox that
    /// is one leads out of the tree).
    static func makeInbox(_ store: Store) throws(AgentError) {
        let store = try store.pinned()
        let made = try Posix.makeFolders(in: store.directory, "inbox", leaves: ["tmp", "new", "cur", "bad"])
        // In a tree set up with init --shared, the group delivers into the carts' inboxes too.
        if !made.isEmpty, let folder = store.folder { try Shared.shareCart(folder.path, root: Posix.dirname(of: folder.shown)) }
    }

    /// Whether the directory of cart `id` still holds the marker of cart `number` (read through
    /// the folder opened without following a link). A marker that cannot be read for a reason
    /// of the moment (no descriptor left, an I/O error) is taken to match: only a marker read,
    /// or a folder or marker that is not there (or not a folder, not a file), says otherwise.
    func markerMatches(_ id: String, number: Int64) -> Bool { markerState(id, number: number) == .matches }

    /// The text of the marker in `ROOT/ID` (read through the folder opened without following a
    /// link), trimmed; nil when there is none to read.
    static func markerText(root: String, id: String) -> String? {
        let bytes = try? Posix.withPinnedFolders(base: root, relative: "\(id)/\(Layout.cartMarker)") { (pinned) throws(AgentError) in
            try Posix.readFile(pinned, limit: 64)
        }
        return bytes.flatMap { $0 }.map { String(decoding: $0, as: UTF8.self).trimmingSpaces }
    }

    /// What the marker of cart `id` says of the cart numbered `number`, as a log line can say it.
    enum MarkerState: Equatable {
        /// The marker names this cart (or could not be read for a passing reason: kept).
        case matches
        /// The database knows `id` no more, or as another cart (given back, adopted again).
        case replacedInDatabase
        /// No marker, or something else than a regular file in its place.
        case lost
        /// A marker that names another sync directory (copied or written over).
        case namesAnother
    }

    /// The state of cart `id`'s marker for the cart numbered `number` (see `markerMatches`).
    func markerState(_ id: String, number: Int64) -> MarkerState {
        guard let known = try? database.withReadTransaction({ () throws(AgentError) in try database.cart(id) }), known.number == number else { return .replacedInDatabase }
        let marker: [UInt8]?
        do {
            marker = try Posix.withPinnedFolders(base: root, relative: "\(id)/\(Layout.cartMarker)") { (pinned) throws(AgentError) in
                try Posix.readFile(pinned, limit: 64)
            }
        } catch {
            if case let .system(failure) = error, !failure.isMissing, !failure.isNotRegular { return .matches }
            return .lost
        }
        guard let marker else { return .lost }
        let named = String(decoding: marker, as: UTF8.self).trimmingSpaces
        if named == known.syncId { return .matches }
        return named.isEmpty ? .lost : .namesAnother
    }

    /// How long a cart whose directory left the tree keeps its rows (an hour;
    /// `BASKET_SYNC_AWAY_SECONDS` for tests): its directory put back as it was, its marker with
    /// it, is served again with its state — the Mealz share, the windows, the numbering.
    static var awaySeconds: Double {
        Posix.environment("BASKET_SYNC_AWAY_SECONDS").flatMap(Double.init).map { max(0, $0) } ?? 3600
    }

    /// When a cart was first seen away: the wall clock, and the boot clock with this boot's id.
    static func awayNote(now: Date) -> String {
        "\(now.timeIntervalSince1970) \(Posix.bootSeconds()) \(Posix.bootId)"
    }

    /// How long a cart has been away, by the note ``awayNote(now:)`` made: on the boot clock
    /// within the boot that made it — a step of the wall clock neither ends a cart early nor
    /// keeps it longer — else (a restart of the machine between, or a note of the wall clock
    /// alone) on the wall clock.
    static func awayFor(since note: String, now: Date) -> Double {
        let fields = note.split(separator: " ")
        if fields.count == 3, String(fields[2]) == Posix.bootId, let boot = Double(fields[1]) {
            return max(0, Posix.bootSeconds() - boot)
        }
        guard let wall = fields.first.flatMap({ Double($0) }) else { return 0 }
        return now.timeIntervalSince1970 - wall
    }

    /// What the tree knows of a cart `id` whose directory is not there: nil when it holds no
    /// such cart; else how long it is still kept (nil: not seen away yet — the next pass marks
    /// it, and it is kept ``awaySeconds`` from then).
    func awayCart(_ id: String, now: Date = Date()) throws(AgentError) -> (known: Bool, keptFor: Double?) {
        try database.withTransaction { () throws(AgentError) in
            guard let known = try database.cart(id) else { return (false, nil) }
            let note = try database.rows(cart: known.number).note(.goneSince)
            return (true, note.map { max(0, Tree.awaySeconds - Tree.awayFor(since: $0, now: now)) })
        }
    }

    /// What a command says of cart `id` at `directory` when its directory left the tree and the
    /// tree keeps it (``awayCart(_:now:)``); nil when the tree knows no such cart.
    func awayMessage(_ id: String, directory: String) -> String? {
        guard let away = try? awayCart(id), away.known else { return nil }
        let kept = away.keptFor.map { "for \(AgentConfiguration.number($0.rounded(.up))) s more" } ?? "for \(AgentConfiguration.number(Tree.awaySeconds)) s from when basket-sync sees it gone"
        return "\(directory): cart \(id)'s directory left the tree; the cart is kept \(kept): put the directory back as it was (its \(Layout.cartMarker) with it) and it is served again with its state"
    }

    /// The carts the database holds whose directory is gone: each is marked away when first
    /// seen so, and ended — every row of it removed — once away for ``awaySeconds``. Returns
    /// those ended, and those still away with the seconds they are still kept (never a time of
    /// the wall clock, which a step would move before the caller reads it).
    func removeGoneCarts(now: Date = Date()) throws(AgentError) -> (ended: [String], away: [String: Double]) {
        try database.withTransaction { () throws(AgentError) in try endGone(try database.carts(), now: now) }
    }

    /// ``removeGoneCarts(now:)`` for the carts `ids` only (those the agent saw leave).
    func removeGoneCarts(_ ids: [String], now: Date = Date()) throws(AgentError) -> (ended: [String], away: [String: Double]) {
        try database.withTransaction { () throws(AgentError) in
            var known: [String: Int64] = [:]
            for id in ids { if let cart = try database.cart(id) { known[id] = cart.number } }
            return try endGone(known, now: now)
        }
    }

    /// Of `carts` (id → number), those whose directory is gone: marked away, or ended once away
    /// long enough (in the caller's transaction).
    private func endGone(_ carts: [String: Int64], now: Date) throws(AgentError) -> (ended: [String], away: [String: Double]) {
        var ended: [String] = []
        var away: [String: Double] = [:]
        for (id, number) in carts where Posix.info("\(root)/\(id)", follow: false)?.kind != .directory {
            let rows = database.rows(cart: number)
            let note = try rows.note(.goneSince)
            if note == nil { try rows.setNote(.goneSince, Tree.awayNote(now: now)) }
            let left = Tree.awaySeconds - (note.map { Tree.awayFor(since: $0, now: now) } ?? 0)
            if left <= 0 {
                try database.removeCart(number)
                ended.append(id)
            } else {
                away[id] = left
            }
        }
        return (ended.sorted(), away)
    }

    /// The store and mode that `set-store` on the root set for the carts that never set their
    /// own (in the caller's transaction); nil when never set.
    func defaultStore() throws(AgentError) -> (String, SyncMode)? {
        try Tree.defaultStore(database)
    }

    static func defaultStore(_ database: Database) throws(AgentError) -> (String, SyncMode)? {
        let root = database.rootRows
        guard let text = try root.note(.defaultStore) else { return nil }
        let parts = text.fields(UInt8(ascii: "\t"), omittingEmpty: false)
        guard parts.count == 2, let mode = SyncMode(rawValue: String(parts[1])) else { return nil }
        return (String(parts[0]), mode)
    }
}

extension String {
    /// Without the spaces and newlines around it.
    var trimmingSpaces: String {
        var text = Substring(self)
        while let last = text.last, last.isWhitespace { text.removeLast() }
        while let first = text.first, first.isWhitespace { text.removeFirst() }
        return String(text)
    }
}

extension Store {
    /// The store of `directory`: a sync directory's (cart 0, made when `create`), or a tree
    /// cart's (adopted when new; its directory made when `makeCart`). A tree's root holds no
    /// cart: refused with a usage error naming what to give instead.
    static func open(directory: String, create: Bool = false, makeCart: Bool = false, readOnly: Bool = false) throws(AgentError) -> Store {
        switch Workspace.of(directory) {
        case .directory:
            return try Store(directory: directory, create: create, readOnly: readOnly)
        case .treeRoot:
            throw .usage("\(directory): is a tree of carts; name one of them: basket-sync -C \(directory)/CART-ID …")
        case let .treeCart(root, id):
            return try Tree(root: root, readOnly: readOnly).cartStore(id, create: makeCart, readOnly: readOnly)
        }
    }
}
