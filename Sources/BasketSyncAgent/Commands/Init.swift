import BasketSync
import BasketSyncWire

extension Commands {
    /// `init`: creates the sync directory, its inbox, its database and a commented configuration.
    /// Idempotent: what exists is kept. Returns what was created, one line each.
    ///
    /// A directory holding records but no database lost its database: refused (73), unless
    /// `adopt`, which takes the files' records into the new database and goes on after them.
    public static func initialize(directory: String, adopt: Bool = false) throws(AgentError) -> [String] {
        switch Place.of(directory) {
        case .treeRoot:
            if adopt { throw .usage("\(directory): is a tree of carts; init --adopt works on one cart's sync directory") }
            return try initializeTree(root: directory)
        case let .treeCart(root, id):
            // A cart of the tree: adopted (made when missing), as the agent would.
            if adopt { throw .usage("\(directory): is cart \(id) of the tree \(root); init --adopt works on a sync directory of its own") }
            let existed = Posix.isDirectory(directory) && Posix.exists("\(directory)/\(Tree.markerName)")
            _ = try Tree(root: root).cartStore(id, create: true)
            return existed ? [] : ["\(directory) (cart \(id) of the tree \(root))"]
        case .directory:
            break
        }
        var created: [String] = []
        if !Posix.isDirectory(directory) {
            try Posix.makeDirectoryTree(directory)
            created.append(directory)
        }
        for folder in ["tmp", "new", "cur", "bad"] where !Posix.isDirectory("\(directory)/inbox/\(folder)") {
            try Posix.makeDirectoryTree("\(directory)/inbox/\(folder)")
            created.append("\(directory)/inbox/\(folder)/")
        }
        let configuration = "\(directory)/\(AgentConfiguration.fileName)"
        if !Posix.exists(configuration) {
            do { try Posix.writeFileAtomically(configuration, Array(AgentConfiguration.defaultFileText.utf8)) } catch {
                throw .system(error)
            }
            created.append(configuration)
        }
        let database = "\(directory)/\(Store.stateDirectoryName)/\(Store.databaseName)"
        let isNew = !Posix.exists(database)
        var found: [Projection: [(seq: UInt64, line: [UInt8])]] = [:]
        if isNew {
            for projection in Projection.allCases {
                let path = "\(directory)/\(projection.fileName)"
                guard let bytes = try Posix.readFile(path, limit: Int.max) else { continue }
                let records = bytes.split(separator: 0x0A).compactMap { line -> (seq: UInt64, line: [UInt8])? in
                    let seq = RecordFormat.seq(ofLine: line)
                    return seq > 0 ? (seq, Array(line) + [0x0A]) : nil
                }
                if !records.isEmpty { found[projection] = records }
            }
            if !found.isEmpty && !adopt {
                let counts = found.map { "\($0.key.fileName) up to \($0.value.map(\.seq).max()!)" }.sorted().joined(separator: ", ")
                throw .refused("\(directory): holds records (\(counts)) but no database: the database was lost. A new one would number them again from 1. Restore .basket-sync/ from a backup, or run basket-sync init --adopt to go on after the files' last records")
            }
        }
        let store = try Store(directory: directory, create: true)
        if isNew { created.append(database) }
        if !found.isEmpty {
            try store.withTransaction { () throws(AgentError) in
                var state = try store.loadState()
                for (projection, records) in found {
                    for record in records { try store.adopt(projection, seq: record.seq, line: record.line) }
                    let last = records.map(\.seq).max()!
                    switch projection {
                    case .outbox: state.lastOutboxSeq = last
                    case .notifications: state.lastNotificationSeq = last
                    case .payments:
                        state.lastPaymentSeq = last
                        // A retried order must still be answered as recorded.
                        for record in records {
                            if let payment = try? RecordFormat.payment(record.line), payment.type == .handlePayment, let order = payment.orderId {
                                state.recordedOrders[ExactID(order)] = payment.seq
                            }
                        }
                    }
                }
                try store.saveState(state)
            }
            for (projection, records) in found.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                created.append("\(directory)/\(projection.fileName): adopted \(records.count) records, going on after \(records.map(\.seq).max()!)")
            }
        }
        return created
    }
}

extension Commands {
    /// `init --tree`: makes a tree of carts at `root` (SPEC §8): its configuration, which says
    /// `"layout": "tree"`, and its one database. Idempotent. Returns what was created.
    public static func initializeTree(root: String) throws(AgentError) -> [String] {
        try Tree.create(root: root)
    }
}

extension Commands {
    /// When `directory` names a cart of a tree (`ROOT/ID`) that is not made yet (no directory, no
    /// inbox, no marker), makes and adopts it, as the agent would; otherwise does nothing.
    public static func prepareCart(directory: String) throws(AgentError) {
        guard case let .treeCart(root, id) = Place.of(directory) else { return }
        if Posix.isDirectory("\(directory)/inbox/new"), Posix.isDirectory("\(directory)/inbox/tmp"), Posix.exists("\(directory)/\(Tree.markerName)") { return }
        _ = try Tree(root: root).cartStore(id, create: true)
    }
}
