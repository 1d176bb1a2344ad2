import BasketSync
import BasketSyncWire

/// `status`: what the directory holds at a glance. A sync directory (or `-C ROOT/ID`) is a tree
/// of one cart: its report is that cart's, in full. On a tree's root, every cart summed up
/// (counts, the carts with a current error, the oldest pending batch), and with `--json` each
/// cart's own report under `"carts"`.
public struct StatusReport {
    /// A sync directory's one cart (nil on a tree's root).
    let only: CartStatus?
    let root: String
    let carts: [(id: String, report: CartStatus)]
    /// Cart directories the database does not hold yet (the agent, or any command on the cart,
    /// adopts them), and carts that could not be read, with why.
    let notAdopted: [String]
    let unreadable: [(id: String, error: String)]
    /// The records and counters of the carts the tree's database holds but that are not
    /// reported (a folder that cannot be read as theirs now — swapped, unreadable — or away):
    /// a tree's counters sum every cart the database holds, so that they never go down while a
    /// cart's folder is out of reach.
    let unreported: [(counts: [Projection: UInt64], counters: SyncCounters)]
    /// The carts of the tree that have a directory: those reported, and those the tree knows
    /// whose directory cannot be read as theirs now (an error of theirs, in ``unreadable``).
    public let cartCount: Int
    /// How the running agent watches the carts, as it said (nil: no agent runs).
    let agentWatch: WatchChoice.RunningAgent?
    /// The tree agent's health (docs/spec.md §12).
    let health: AgentHealth
    let now = Date()
    /// The database file, and what is wrong with where it is, if anything.
    let database: (path: String, warning: String?)

    /// Why `basket-sync.json` cannot be used (file:line:column and what to do), if it cannot:
    /// the report then shows the defaults, and every other command but `push` refuses with 78.
    public var configurationProblem: String? { only?.configurationProblem }

    /// Reads every cart of `directory` as committed now (read only).
    public init(directory: String) throws(AgentError) {
        guard case .treeRoot = Workspace.of(directory) else {
            let only = try CartStatus(directory: directory)
            self.only = only
            (root, carts, notAdopted, unreadable, unreported, agentWatch, health) = (directory, [], [], [], [], nil, only.health)
            cartCount = 1
            database = only.database
            return
        }
        only = nil
        let root = directory
        self.root = root
        let tree = try Tree(root: root, readOnly: true)
        database = (tree.database.databasePath, tree.database.placeWarning)
        let known = try tree.database.withTransaction { () throws(AgentError) in try tree.database.carts() }
        let rootStore = tree.database.rootRows
        let health = AgentHealth.read(rootStore)
        self.health = health
        agentWatch = health.agent
        var carts: [(id: String, report: CartStatus)] = []
        var notAdopted: [String] = []
        var unreadable: [(id: String, error: String)] = []
        var knownUnreadable = 0
        for id in try tree.cartDirectories() {
            guard known[id] != nil else {
                // One that holds records is refused until adopted or the database is restored: an
                // error, said as the cart's commands say it (one holding another cart's marker
                // whose folder left: moved here, to be put back, never adopted).
                // (Read only, it refuses one holding records; anything else waits to be adopted.)
                do { _ = try tree.cartStore(id, create: false, readOnly: true) } catch {
                    if case .refused = error { unreadable.append((id, error.description)) } else { notAdopted.append(id) }
                }
                continue
            }
            do {
                let store = try tree.cartStore(id, create: false, readOnly: true)
                carts.append((id, try CartStatus(store: store, configuration: tree.configuration, health: health)))
            } catch {
                knownUnreadable += 1
                // A marker that does not match: the directory was made again, not adopted yet.
                if case .missingInput = error, let refusal = Tree.refusal(id: id, root: root) {
                    unreadable.append((id, refusal))
                } else if case .missingInput = error {
                    notAdopted.append(id)
                } else {
                    unreadable.append((id, error.description))
                }
            }
        }
        self.carts = carts
        let reported = Set(carts.map(\.id))
        unreported = try tree.database.withReadTransaction { () throws(AgentError) in
            var unreported: [(counts: [Projection: UInt64], counters: SyncCounters)] = []
            for (id, number) in known.sorted(by: { $0.key < $1.key }) where !reported.contains(id) {
                let rows = tree.database.rows(cart: number)
                var counts: [Projection: UInt64] = [:]
                for projection in Projection.allCases { counts[projection] = try rows.lastSeq(projection) }
                // A cart whose state cannot be read has its error said where it is reported.
                guard let state = try? rows.loadState() else { continue }
                unreported.append((counts, state.counters))
            }
            return unreported
        }
        cartCount = carts.count + knownUnreadable
        self.notAdopted = notAdopted
        self.unreadable = unreadable
    }

    /// What every cart the database holds counted: the records of each file and the library's
    /// counters (a sync directory's one cart).
    var counted: [(counts: [Projection: UInt64], counters: SyncCounters)] {
        if let only { return [(only.counts, only.state.counters)] }
        return carts.map { ($0.report.counts, $0.report.state.counters) } + unreported
    }

    private func total(_ projection: Projection) -> UInt64 { counted.reduce(0) { $0 + ($1.counts[projection] ?? 0) } }

    private var oldestPending: (id: String, batch: PendingBatch)? {
        carts.compactMap { cart in cart.report.state.pending.min { $0.at < $1.at }.map { (cart.id, $0) } }.min { $0.batch.at < $1.batch.at }
    }

    /// How many carts have events waiting in `inbox/new/`.
    private var cartsWaiting: Int { carts.filter { $0.report.inboxWaiting > 0 }.count }

    private var withErrors: [(id: String, error: String)] {
        carts.compactMap { cart in cart.report.currentError.map { (cart.id, $0) } } + unreadable
    }

    /// The report for people.
    public var human: String {
        if let only { return only.human }
        var lines = ["tree \(root): \(cartCount) carts\(notAdopted.isEmpty ? "" : ", \(notAdopted.count) directories not adopted yet")"]
        lines.append("last seqs, every cart's summed: outbox \(total(.outbox)), notifications \(total(.notifications)), payments \(total(.payments))")
        let pending = carts.reduce(0) { $0 + $1.report.state.pending.count }
        if let (id, batch) = oldestPending {
            let age = (max(0, now.timeIntervalSince(batch.at)) * 10).rounded() / 10
            lines.append("pending batches: \(pending) in \(carts.filter { !$0.report.state.pending.isEmpty }.count) carts; the oldest: cart \(id) #\(batch.seq), age \(age) s")
        } else {
            lines.append("pending batches: none")
        }
        let waiting = carts.reduce(0) { $0 + $1.report.inboxWaiting }, bad = carts.reduce(0) { $0 + $1.report.inboxBad }
        let oldest = carts.compactMap { $0.report.oldestWaiting }.max().map { " (the oldest for \(Int($0.rounded())) s)" } ?? ""
        lines.append("inbox: \(waiting) waiting in new/\(oldest) in \(cartsWaiting) carts, \(bad) in bad/ (every cart)")
        lines.append(health.text)
        let errors = withErrors
        // How the running agent sees the carts (what it said at its start), else how one started
        // now would, as the carts' file systems decide.
        let polled = carts.compactMap { $0.report.watch }.filter(\.polls)
        if let agentWatch {
            lines.append("watch: \(agentWatch.text)")
        } else if let first = polled.first {
            lines.append("watch: no agent runs; one started now would use \(polled.count == carts.count ? first.description : "\(first.description) for \(polled.count) carts, inotify for the others")")
        } else if let first = carts.first?.report.watch {
            lines.append("watch: no agent runs; one started now would use \(first.description)")
        }
        lines.append("database: \(database.path)\(database.warning.map { " — WARNING: \($0)" } ?? "")")
        lines.append(errors.isEmpty ? "carts with an error: none" : "carts with an error: \(errors.count)")
        for (id, error) in errors.prefix(20) { lines.append("  \(id): \(error)") }
        if errors.count > 20 { lines.append("  … and \(errors.count - 20) more (status --json lists them all)") }
        if !notAdopted.isEmpty {
            lines.append("not adopted yet: \(notAdopted.prefix(20).joined(separator: " "))\(notAdopted.count > 20 ? " …" : "")")
        }
        return lines.map(JSONWriter.printable).joined(separator: "\n") + "\n"
    }

    /// The report for scripts: the sums, then each cart's own report under `"carts"`.
    public var json: String {
        if let only { return only.json }
        var writer = JSONWriter()
        writer.object { object in
            object.member("tree", root)
            object.member("cartCount", cartCount)
            object.member("database") { writer in CartStatus.write(database, into: &writer) }
            // The same shape as one directory's: the running agent (or null).
            object.member("watch") { writer in
                writer.object { object in
                    object.member("agent") { WatchChoice.RunningAgent.write(agentWatch, into: &$0) }
                }
            }
            object.member("records") { writer in
                writer.object { records in
                    records.member("outbox", total(.outbox))
                    records.member("notifications", total(.notifications))
                    records.member("payments", total(.payments))
                }
            }
            object.member("oldestPending") { writer in
                guard let (id, batch) = oldestPending else { return writer.raw("null") }
                writer.object { pending in
                    pending.member("cart", id)
                    pending.member("seq", batch.seq)
                    pending.member("ageSeconds") { $0.raw(text: String(max(0, now.timeIntervalSince(batch.at)))) }
                }
            }
            object.member("withErrors") { writer in
                writer.array(withErrors) { writer, cart in
                    writer.object { line in
                        line.member("cart", cart.id)
                        line.member("error", cart.error)
                    }
                }
            }
            object.member("notAdopted") { writer in writer.array(notAdopted) { $0.string($1) } }
            // The health of docs/spec.md §12 for the whole tree: the agent, and the carts summed up.
            object.member("health") { writer in
                writer.object { object in
                    health.write(into: &object)
                    object.member("cartsWithErrors", withErrors.count)
                    object.member("cartsWaiting", cartsWaiting)
                    object.member("cartsPending", carts.filter { !$0.report.state.pending.isEmpty }.count)
                    object.member("oldestWaitingSeconds") { $0.raw(text: carts.compactMap { $0.report.oldestWaiting }.max().map { AgentConfiguration.number(($0 * 10).rounded() / 10) } ?? "null") }
                }
            }
            object.member("carts") { writer in
                writer.array(self.carts) { writer, cart in
                    writer.object { line in
                        line.member("cart", cart.id)
                        line.member("status") { $0.raw(text: String(cart.report.json.dropLast())) }
                    }
                }
            }
        }
        writer.raw("\n")
        return writer.text
    }
}
