import BasketSync
import BasketSyncWire

extension Commands {
    /// `init`: creates the sync directory, its inbox, its database and a commented configuration.
    /// Idempotent: what exists is kept. Returns what was created, one line each.
    ///
    /// A directory holding records but no database lost its database: refused (73), unless
    /// `adopt`, which takes the files' records into the new database and goes on after them.
    /// `tree` (`init --tree`) makes a tree's root; a directory that is one already is kept one.
    public static func initialize(directory: String, adopt: Bool = false, tree: Bool = false, rebind: Bool = false) throws(AgentError) -> [String] {
        if tree { return try makeTree(root: directory, adopt: adopt, rebind: rebind) }
        switch Workspace.of(directory) {
        case .treeRoot:
            return try makeTree(root: directory, adopt: adopt, rebind: rebind)
        case let .treeCart(root, id):
            // A cart of the tree: adopted (made when missing), as the agent would; with --adopt,
            // a directory new to the tree that holds records goes on after them.
            let tree = try Tree(root: root)
            let known = try tree.database.withTransaction { () throws(AgentError) in try tree.database.cart(id) }
            let existed = Posix.isDirectory(directory) && known.map { tree.markerMatches(id, number: $0.number) } == true
            if existed {
                // Its folders as they should be (an inbox that became a link is refused).
                _ = try tree.cartStore(id, create: false)
                return []
            }
            var adopted: [Projection: [(seq: UInt64, line: [UInt8])]] = [:]
            var torn: Recovery.TornRecord?
            _ = try tree.cartStore(id, create: true, adopting: adopt ? { (store) throws(AgentError) in
                // Through the cart's folder as opened.
                adopted = try Recovery.recordsInFiles(store.directory)
                torn = try Recovery.adoptRecords(adopted, into: store, directory: store.directory)
            } : nil)
            try Recovery.cut(torn, directory: directory)
            return ["\(directory) (cart \(id) of the tree \(root))"] + Recovery.adoptedLines(adopted, directory: directory, torn: torn)
        case .directory:
            if let outer = Workspace.enclosing(directory) {
                throw .refused("\(directory): is inside \(outer), a sync directory or a tree of carts; make the sync directory elsewhere (in a tree, a cart is a directory right under its root)")
            }
            // A database that is a tree's under a configuration that says otherwise: said before anything is made.
            if Posix.exists(try Database.path(of: directory)) { _ = try Store(directory: directory, create: false, readOnly: true, rebinding: rebind) }
        }
        var created: [String] = []
        if !Posix.isDirectory(directory) {
            try Posix.makeDirectoryTree(directory)
            created.append(directory)
        }
        // Never through a link: an inbox that is one leads out of the directory.
        for folder in ["tmp", "new", "cur", "bad"] {
            created += try Posix.makeFolders(in: directory, "inbox/\(folder)").map { $0 + "/" }
        }
        let configuration = "\(directory)/\(AgentConfiguration.fileName)"
        if !Posix.exists(configuration) {
            do { try Posix.writeFileAtomically(configuration, Array(AgentConfiguration.defaultFileText.utf8)) } catch {
                throw .system(error)
            }
            created.append(configuration)
        }
        let database = try Database.path(of: directory)
        let isNew = !Posix.exists(database)
        var found: [Projection: [(seq: UInt64, line: [UInt8])]] = [:]
        if isNew {
            try Agent.refuseNewDatabaseBesideAnAgent(directory)
            found = try Recovery.recordsInFiles(directory)
            // A file at an output's name holding lines but none of basket-sync's records: every
            // command refuses to append to it (73); said now, before a database is made for it.
            // (A torn record of this directory alone is its own: cut when adopted.)
            let torn = Recovery.tornRecord(directory: directory, found: found)
            for projection in Projection.allCases where found[projection] == nil {
                let path = "\(directory)/\(projection.fileName)"
                if projection == .outbox, let torn, torn.wholeSize == 0 { continue }
                if let info = Posix.info(path, follow: false), info.kind != .regular || info.size > 0 {
                    throw .refused("\(path): holds \(info.kind == .regular ? "lines but no record of basket-sync" : "no file but \(info.kind.name)") (another program's, or a forged one): basket-sync appends only to its own files, and would refuse it at its first record. Move it away (the first record starts a new file), then run init again")
                }
            }
            if !found.isEmpty && !adopt {
                let counts = found.map { "\($0.key.fileName) up to \($0.value.map(\.seq).max()!)" }.sorted().joined(separator: ", ")
                throw .refused("\(directory): holds records (\(counts)) but no database: the database was lost. A new one would number them again from 1. Restore .basket-sync/ from a backup, or run basket-sync init --adopt to go on after the files' last records")
            }
            // No record left, no claim from the host, but events taken before (inbox/cur/): the
            // directory had a past the files no longer show; a new database would number from 1.
            let taken = Posix.countNames(in: "\(directory)/inbox/cur") { !$0.hasPrefix(".") }
            if found.isEmpty, !adopt, taken > 0, (Recovery.cartClaim(directory: directory) ?? 0) == 0 {
                throw .refused("\(directory): inbox/cur/ holds \(taken) events taken before, but no record is left and the cart shows no syncedThrough: the database and the records were lost or moved away, and a new database would number records from 1 again. Restore .basket-sync/ (and the records) from a backup, or run basket-sync init --adopt to go on (numbered from 1: tell a host that counts the records it processed)")
            }
        }
        let store = try Store(directory: directory, create: true, rebinding: rebind)
        if isNew { created.append(database) }
        // A database there already, but behind the files (restored from an older backup): said,
        // with the ways out, rather than "nothing to create".
        if !isNew {
            try Integrity.checkNotBehind(directory) { (projection) throws(AgentError) in
                try store.withTransaction { () throws(AgentError) in try store.lastSeq(projection) }
            }
        }
        if isNew {
            // Also without records: events in inbox/cur/ were taken (their ids stay taken).
            let torn = try store.withTransaction { () throws(AgentError) in try Recovery.adoptRecords(found, into: store, directory: directory) }
            try Recovery.cut(torn, directory: directory)
            created += Recovery.adoptedLines(found, directory: directory, torn: torn)
        }
        return created
    }






}

extension Commands {
    /// `init --tree [--adopt]`: makes a tree of carts at `root` (docs/spec.md §8): its configuration,
    /// which says `"layout": "tree"`, and its one database. Idempotent. Returns what was created.
    /// A new database where carts hold records (the database was lost) is refused (73); with
    /// `adopt`, each such cart is adopted with its records, as `init --adopt -C ROOT/ID` would.
    private static func makeTree(root: String, adopt: Bool, rebind: Bool) throws(AgentError) -> [String] {
        var created = try Tree.create(root: root, adopt: adopt, rebind: rebind)
        guard adopt else { return created }
        let tree = try Tree(root: root)
        // Each cart on its own: one that cannot be adopted stops only itself (docs/spec.md §8).
        var failed: [String] = []
        for id in try tree.cartDirectories() {
            let directory = "\(root)/\(id)"
            do {
                let known = try tree.database.withTransaction { () throws(AgentError) in try tree.database.cart(id) }
                guard known.map({ tree.markerMatches(id, number: $0.number) }) != true, Tree.refusal(id: id, root: root) != nil else { continue }
                var adopted: [Projection: [(seq: UInt64, line: [UInt8])]] = [:]
                var torn: Recovery.TornRecord?
                _ = try tree.cartStore(id, create: false, adopting: { (store) throws(AgentError) in
                    // Through the cart's folder as opened.
                    adopted = try Recovery.recordsInFiles(store.directory)
                    torn = try Recovery.adoptRecords(adopted, into: store, directory: store.directory)
                })
                try Recovery.cut(torn, directory: directory)
                created += ["\(directory) (cart \(id) of the tree \(root))"] + Recovery.adoptedLines(adopted, directory: directory, torn: torn)
            } catch {
                failed.append("cart \(id): \(error.description)")
            }
        }
        guard failed.isEmpty else {
            let done = created.isEmpty ? "" : "; done: " + created.joined(separator: "; ")
            throw .refused("\(root): \(failed.count) cart(s) not adopted — \(failed.joined(separator: "; ")) — mend them and run basket-sync -C \(root) init --tree --adopt again\(done)")
        }
        return created
    }
}

extension Commands {
    /// When `directory` names a cart of a tree (`ROOT/ID`) that is not made yet (no directory, no
    /// inbox, no marker), makes and adopts it, as the agent would; otherwise does nothing.
    public static func prepareCart(directory: String) throws(AgentError) {
        guard case let .treeCart(root, id) = Workspace.of(directory) else { return }
        if Workspace.isMade(root: root, id: id) {
            // Only into this id's cart: a folder holding another cart's marker (two carts'
            // folders swapped, one moved in under this id) is refused as every command refuses
            // it — where this account can read the tree's database (the Mealz side of a shared
            // tree cannot tell; trees.md).
            // A folder not adopted yet (its marker a database made again no longer knows, no
            // records) takes the delivery: the next pass adopts it.
            guard let tree = try? Tree(root: root, readOnly: true) else { return }
            do { _ = try tree.cartStore(id, create: false, readOnly: true) } catch {
                if case .refused = error { throw error }
            }
            return
        }
        // Another account than the tree's (the Mealz side of a shared tree) may not adopt a cart:
        // it makes the folder and its delivery folders, open to the group, and the agent (or
        // the next command of the tree's account) takes the cart on as it takes a host's.
        if Posix.unwritable("\(root)/\(Layout.stateDirectory)") != nil {
            do throws(SystemError) { try Posix.makeDirectory(directory, mode: 0o770) } catch { throw .system(error) }
            let folder: CartFolder
            do { folder = try CartFolder(directory) } catch { throw .system(error) }
            try Posix.makeFolders(in: folder.path, "inbox", leaves: ["tmp", "new"])
            // Where the tree is shared, the group (the agent's account with it) writes them too:
            // the agent makes cur/ and bad/ in inbox/ and moves deliveries out of new/, so
            // neither is sticky (in a folder of this account's, a sticky bit would keep the
            // agent from moving what this account delivered).
            if Shared.isShared(root), let group = Posix.info(root, follow: false)?.group {
                try Shared.set(folder.path, group: group, mode: Shared.openMode)
                for inner in ["inbox", "inbox/tmp", "inbox/new"] {
                    try Posix.withPinnedFolders(base: folder.path, relative: inner) { (pinned) throws(AgentError) in
                        try Shared.set(pinned, group: group, mode: 0o2770)
                    }
                }
            }
            return
        }
        let tree = try Tree(root: root)
        // A cart whose directory left the tree a moment ago is kept to be put back: a delivery
        // made it again would end it. Refused for now (75): once put back, or once ended, the
        // delivery goes through.
        if !Posix.exists(directory), let away = tree.awayMessage(id, directory: directory) {
            throw .busy("\(away). The delivery is refused meanwhile (it would make a new cart under this id and end this one): push again once the directory is back, or once that time is over")
        }
        _ = try tree.cartStore(id, create: true)
    }
}
