import BasketSync
import BasketSyncWire

/// `status`: the state of a sync directory at a glance, for people and (`--json`) for scripts.
public struct CartStatus {
    let directory: String
    /// The cart's path relative to the directory (the default when the configuration is broken).
    let cart: String
    let state: SyncState
    /// Where the store and mode in force come from: `"own"` (`set-store` on this directory or
    /// cart), `"tree"` (the tree's default, `set-store` on its root), nil when none was set.
    let storeSource: String?
    /// Whether this is one cart of a tree.
    let isTreeCart: Bool
    let view: [ExactID: Int]
    /// Per Mealz line, what its pending batches add up to; and the Mealz lines in order. Made
    /// once: a line at a time, each walked every pending batch (a batch of 20,000 lines made
    /// `status` take a minute).
    private let pendingDeltas: [ExactID: Int]
    private let mealzIds: [ExactID]
    /// The host's progress (docs/spec.md §4 rule 4): the one value `apply` starts after and `wait`
    /// waits after.
    /// Nil where the database is read without its last commits (a read-only view without the
    /// write-ahead log's index): not known here.
    let hostProgress: UInt64?
    /// The database read without its last commits, said as its current error.
    let missesCommits: String?
    let lastLines: [Projection: [UInt8]]
    let counts: [Projection: UInt64]
    let inboxTaken: Int64
    let inboxWaiting: Int
    let inboxBad: Int
    /// Why `inbox/new/` cannot be read (not a directory, a link, no permission), if it cannot.
    let inboxProblem: String?
    /// The entries waiting in `inbox/new/`.
    private let waitingNames: [String]
    /// JSON Lines files holding records the database does not (it was lost, restored or replaced).
    let databaseBehind: [String]
    /// The rotation of a JSON Lines file blocked by a part that is not basket-sync's (a
    /// directory or a link planted under `NAME.2`, another account's file): the file grows.
    let rotationBlocked: [String]
    /// The file system of the database or of the directory full: nothing can be recorded —
    /// not the events, the carts, nor the error that says so — until space is freed.
    let storageFull: String?
    /// Rotated parts holding records out of order: not basket-sync's (forged, or another
    /// directory's); the database is not behind for them.
    let foreignParts: [String]
    let errors: [(at: String, level: String, message: String)]
    /// The last time two deliveries could not be ordered (docs/spec.md §4 rule 6), and what was said.
    let orderUnknown: (at: String, message: String)?
    let now: Date
    /// The last cart version read: when, how ("taken", "unchanged", "rejected"), and the error
    /// of a rejection.
    let lastCartRead: (at: String, produced: String, error: String)?
    /// The last cart version that changed something: when, and what it produced ("notified #5").
    let lastCartTaken: (at: String, produced: String, error: String)?
    /// When the last whole pass (start of the agent, a retry, `sync`) went through.
    let lastGoodPass: String?
    /// Deliveries of an event id taken before: acknowledged, not done again.
    let inboxDuplicates: Int
    /// The retention in force, if any: the counts of ids are of those kept.
    let retentionDays: Double?
    /// How `watch` sees this directory's changes (inotify or polling, and why) as an agent
    /// started now would see them; nil when it cannot say (a broken BASKET_SYNC_WATCH_MODE).
    let watch: WatchChoice?
    /// How the running agent watches, as it said at its start (nil: no agent runs).
    let agentWatch: WatchChoice.RunningAgent?
    /// The agent's health (docs/spec.md §12), the tree's agent for a tree's cart.
    let health: AgentHealth
    /// How long the oldest event waiting in `inbox/new/` has waited, in seconds.
    let oldestWaiting: Double?
    /// Why no agent could start with the settings of now (a bad BASKET_SYNC_WATCH_MODE), if so.
    let watchProblem: String?
    /// Why `basket-sync.json` cannot be used (file:line:column and what to do), if it cannot:
    /// the report then shows the defaults, and every other command but `push` refuses with 78.
    public let configurationProblem: String?
    /// The database file, and what is wrong with where it is (a network file system), if anything.
    let database: (path: String, warning: String?)

    /// Reads the state of `directory` as committed now.
    public init(directory: String) throws(AgentError) {
        // It only reads: it works on a read-only file system too.
        let store = try Store.open(directory: directory, readOnly: true)
        let configuration: AgentConfiguration
        var problem: String?
        do {
            configuration = try AgentConfiguration.load(directory: directory)
        } catch where error.exitCode == 78 {
            (configuration, problem) = (AgentConfiguration(), error.description)
        }
        try self.init(store: store, configuration: configuration, lookForAgent: true, configurationProblem: problem)
    }

    /// Reads the state of the cart `store` holds as committed now.
    /// `health`: the agent's, read once for a tree's every cart (read here when `lookForAgent`).
    init(store: Store, configuration: AgentConfiguration, lookForAgent: Bool = false, health: AgentHealth? = nil,
         configurationProblem: String? = nil) throws(AgentError) {
        // Read through the cart's folder as opened; named as people know it.
        let directory = store.directory
        self.directory = store.shownDirectory
        self.configurationProblem = configurationProblem
        database = (store.databasePath, store.database.placeWarning)
        cart = configuration.cart
        retentionDays = configuration.retention?.days
        do {
            watch = configurationProblem != nil ? nil : try WatchChoice.decide(directory: directory, cart: configuration.cart, settings: configuration.watch, override: nil)
            watchProblem = nil
        } catch {
            (watch, watchProblem) = (nil, error.description)
        }
        // A cart of a tree: the tree's agent (its note is on the root's row).
        let root = store.cart == 0 ? store : store.database.rootRows
        let health = health ?? (lookForAgent ? AgentHealth.read(root) : AgentHealth(state: .none))
        self.health = health
        agentWatch = health.agent
        var lastLines: [Projection: [UInt8]] = [:]
        var counts: [Projection: UInt64] = [:]
        var notes: [Note: String] = [:]
        var source: String?
        (state, lastLines, counts, inboxTaken, errors) = try store.withTransaction { () throws(AgentError) in
            for projection in Projection.allCases {
                let last = try store.lastSeq(projection)
                counts[projection] = last
                if last > 0, let line = try store.lines(projection, after: last - 1).first { lastLines[projection] = line.line }
            }
            for note in [Note.cartRead, .cartTaken, .passOK, .inboxDuplicates, .orderUnknown] { notes[note] = try store.note(note) }
            var machine = SyncStateMachine(state: try store.loadState())
            // Pending windows as the next step will see them after a step of the wall clock.
            _ = try SyncEngine.followClockSteps(&machine, store: store, offset: SyncEngine.clockOffset(Date()))
            // A cart of a tree that never set its own store follows the tree's default: shown as
            // its store now (its next pass takes it, as a payment's would).
            let ownNote = try store.note(.ownStore)
            let own = store.cart == 0 || ownNote != nil
            if !own, let (storeId, mode) = try Tree.defaultStore(store.database) {
                _ = machine.setSelectedStore(externalId: storeId, mode: mode, at: Date())
            }
            let state = machine.state
            if state.storeId != nil || state.mode != .standalone { source = own ? "own" : "tree" }
            return (state, lastLines, counts, try store.inboxCount(), try store.reports(limit: 5))
        }
        storeSource = source
        isTreeCart = store.cart != 0
        func cartNote(_ key: Note) -> (String, String, String)? {
            let fields = notes[key].map { $0.split(separator: "\t", maxSplits: 2, omittingEmptySubsequences: false).map(String.init) } ?? []
            return fields.count == 3 ? (fields[0], fields[1], fields[2]) : nil
        }
        lastCartRead = cartNote(.cartRead)
        lastCartTaken = cartNote(.cartTaken)
        lastGoodPass = notes[.passOK]
        inboxDuplicates = notes[.inboxDuplicates].flatMap { Int($0) } ?? 0
        orderUnknown = notes[.orderUnknown].flatMap { note in
            let parts = note.split(separator: "\t", maxSplits: 1).map(String.init)
            return parts.count == 2 ? (parts[0], parts[1]) : nil
        }
        self.lastLines = lastLines
        self.counts = counts
        // The sync id an outbox line must carry, once its file was given records (as the agent asks).
        let given = try store.withTransaction { () throws(AgentError) -> [Projection: UInt64] in
            var given: [Projection: UInt64] = [:]
            for projection in Projection.allCases { given[projection] = try store.given(projection)?.seq ?? 0 }
            return given
        }
        let ownSyncId = { [syncId = state.syncId] (projection: Projection) -> String? in (given[projection] ?? 0) > 0 ? syncId : nil }
        // A reader that cannot see the last commits cannot tell a database behind.
        databaseBehind = store.database.connection.missesCommits ? [] : Projection.allCases.compactMap { projection in
            let inDatabase = counts[projection] ?? 0
            guard let (path, inFile) = Integrity.fileBeyond(projection, in: directory, databaseSeq: inDatabase, syncId: ownSyncId(projection)) else { return nil }
            return "\(PinnedNames.named(path)) holds record \(inFile) but the database ends at \(inDatabase): the database was lost, restored or replaced; every command that writes stops (74) until .basket-sync/ is restored from a newer backup, or moved aside and made again with basket-sync init --adopt"
        }
        let databaseOwner = Posix.info(store.databasePath, follow: true)?.owner ?? UInt32.max
        storageFull = [store.stateDirectory, directory].lazy.compactMap { FileSystemKind.full($0, forOwner: databaseOwner) }.first
            .map { "\($0): basket-sync can record nothing — events, carts, payments, nor this error in its database — until space is freed" }
        rotationBlocked = configuration.rotate.map { rotation in
            Projection.allCases.compactMap { JSONLinesFile.rotationBlocker(of: "\(directory)/\($0.fileName)", keep: rotation.keep).map(PinnedNames.named) }
        } ?? []
        foreignParts = (Integrity.foreignParts(in: directory, syncId: ownSyncId) { counts[$0] ?? 0 }
            + (configuration.rotate.map { rotation in Projection.allCases.flatMap { JSONLinesFile.partsLeftPastKeep(of: "\(directory)/\($0.fileName)", keep: rotation.keep) } } ?? []))
            .map(PinnedNames.named)
        let machine = SyncStateMachine(state: state)
        view = machine.mealzView
        pendingDeltas = machine.pendingDeltas
        mealzIds = machine.mealzRelatedIds.sorted()
        missesCommits = store.database.connection.missesCommits ? store.database.placeWarning : nil
        hostProgress = missesCommits != nil ? nil : try CartReader.hostProgress(state, store: store, directory: directory, configuration: configuration)
        do {
            let waiting = try Inbox(directory: "\(directory)/inbox").waiting()
            inboxWaiting = waiting.count
            waitingNames = waiting
            inboxProblem = nil
            let oldest = waiting.compactMap { Posix.info("\(directory)/inbox/new/\($0)", follow: false)?.changed }.min()
            oldestWaiting = oldest.map { max(0, Date().timeIntervalSince1970 - Double($0) / 1e9) }
        } catch {
            inboxWaiting = 0
            waitingNames = []
            inboxProblem = error.description
            oldestWaiting = nil
        }
        inboxBad = Posix.countNames(in: "\(directory)/inbox/bad", where: Inbox.isSetAside)
        now = Date()
    }

    /// Whether the last error still holds, as far as basket-sync can tell: a cart error is
    /// decided by the last cart read (its own rejection holds while it is of the cart as set
    /// now; any cart error before it is over), a failed pass by a whole pass that went through
    /// since; an event set aside in `inbox/bad/` stays there for a person to look at.
    private func standing(of error: (at: String, level: String, message: String)) -> (current: Bool, note: String) {
        let settingChanged = (false, "resolved: the cart is \(cart) now (its setting changed since); the file rejected is no longer read")
        if isCartError(error.message) {
            if error.message.hasPrefix("the cart says syncedThrough"), (state.hostClaim ?? 0) > state.lastOutboxSeq {
                return (true, "still current: the cart's syncedThrough is beyond the outbox")
            }
            // The last read decides: its own rejection holds while it is of the cart as set now;
            // any cart error before it is over (a valid cart, or another rejection, came since).
            if let read = lastCartRead {
                if read.produced == "rejected", read.error == error.message {
                    return isAboutTheCartNow(error.message) ? (true, "still current: no valid cart read since") : settingChanged
                }
                if read.at > error.at {
                    return (false, read.produced == "rejected" ? "resolved at \(read.at): the cart was read again since (and rejected, for what the cart line says)" : "resolved at \(read.at): a valid cart was read since")
                }
            }
            // Not read since (a cart that could not be opened is noted as no read).
            return isAboutTheCartNow(error.message) ? (true, "still current: no valid cart read since") : settingChanged
        }
        if error.message.hasPrefix("\(directory)/inbox/") {
            if isStuck(error.message) {
                return (true, "still current: the entry is still in inbox/new/, where basket-sync can neither take it nor set it aside (another account's directory or file?); move it away")
            }
            // An entry that left new/: set aside in bad/ (under its name, or another beside it),
            // or taken since (a reason of the moment, a lease, lifted). Its name ends at one of
            // the message's colons (a place `:LINE:COLUMN:` or the reason's `: ` follows it, and
            // a Maildir name may hold colons of its own): the one that names an entry there.
            let prefix = "\(directory)/inbox/new/"
            if error.message.hasPrefix(prefix) {
                let rest = error.message.dropFirst(prefix.count).prefix { $0 != "/" }
                let names = rest.indices.filter { rest[$0] == ":" }.map { String(rest[..<$0]) }.filter(Posix.isOneComponent)
                let setAside = names.contains { name in
                    Posix.info("\(directory)/inbox/bad/\(name)", follow: false) != nil
                        || Posix.containsName(in: "\(directory)/inbox/bad", where: { $0.hasPrefix(name + ".again.") })
                }
                if !names.isEmpty, !setAside {
                    if let taken = names.last(where: { Posix.info("\(directory)/inbox/cur/\($0)", follow: false) != nil }) {
                        return (false, "resolved: the entry was taken since (inbox/cur/\(taken))")
                    }
                    return (false, "resolved: the entry is no longer in inbox/new/, nor set aside in inbox/bad/ (moved away)")
                }
            }
            return (false, "an inbox entry set aside in inbox/bad/ with a .error file")
        }
        if let lastGoodPass, lastGoodPass > error.at {
            return (false, "resolved at \(lastGoodPass): a whole pass went through since")
        }
        return (true, "still current: no whole pass has gone through since")
    }

    /// Whether an inbox error is about an entry still waiting in `inbox/new/`: one basket-sync
    /// could neither take nor set aside stays there, and its error holds while it does.
    private func isStuck(_ message: String) -> Bool {
        let prefix = "\(directory)/inbox/new/"
        guard message.hasPrefix(prefix) else { return false }
        let rest = message.dropFirst(prefix.count)
        return waitingNames.contains { rest.hasPrefix($0 + ":") || rest.hasPrefix($0 + " ") || rest == $0 }
    }

    /// Whether an error is about the cart: it says what the cart says, or it names a file of the
    /// directory that is none of basket-sync's own files or folders (`inbox/` included) — the
    /// cart as set now, or as it was set when the error was noted (`"cart"` may have changed).
    private func isCartError(_ message: String) -> Bool {
        if message.hasPrefix("the cart says") { return true }
        guard message.hasPrefix("\(directory)/") else { return false }
        let path = message.dropFirst(directory.count + 1).prefix { $0 != ":" && $0 != " " }
        let components = path.split(separator: "/")
        return !components.isEmpty && !AgentConfiguration.isOwn(components)
    }

    /// Whether a cart error is about the cart as set now: a file of the directory it names is
    /// the cart (`"cart"` changed since, the file rejected is no longer read: it holds no more).
    private func isAboutTheCartNow(_ message: String) -> Bool {
        let cartPath = "\(directory)/\(cart)"
        return !message.contains("\(directory)/") || message.contains(cartPath + ":") || message.contains(cartPath + " ")
    }

    /// Every error that holds now, each on its own (a later one never hides another): the cart
    /// (the last one read was rejected, or claims beyond the outbox), the inbox (unusable), the
    /// database (behind its files), a pass (failed, no whole pass since).
    var currentErrors: (cart: String?, inbox: String?, database: String?, pass: String?) {
        var cartError: String?
        if let read = lastCartRead, read.produced == "rejected", isAboutTheCartNow(read.error) { cartError = "\(read.at) \(read.error)" }
        if cartError == nil, let claim = state.hostClaim, claim > state.lastOutboxSeq {
            cartError = "\(directory)/\(cart): the cart says syncedThrough \(claim) but the outbox ends at \(state.lastOutboxSeq)"
        }
        // The cart that could not be read at all (a permission, an I/O error): no rejection is
        // noted, the pass failed on it; it holds until the cart is read again.
        if cartError == nil, let error = errors.first(where: { $0.level == "error" && isCartError($0.message) }), standing(of: error).current {
            cartError = "\(error.at) \(error.message)"
        }
        let pass = errors.first { error in
            error.level == "error" && !isCartError(error.message) && !error.message.hasPrefix("\(directory)/inbox/")
        }.flatMap { standing(of: $0).current ? "\($0.at) \($0.message)" : nil }
        let stuck = errors.first { $0.level == "error" && isStuck($0.message) }.map { "\($0.at) \($0.message)" }
        return (cartError, inboxProblem.map { "inbox unusable: \($0)" } ?? stuck, missesCommits ?? databaseBehind.first ?? storageFull ?? rotationBlocked.first, pass)
    }

    /// The error that holds now, one of ``currentErrors`` (the same rule for `status`, its
    /// health and the metrics): the database behind its files, the inbox, the cart, a pass.
    var currentError: String? {
        let current = currentErrors
        return current.database ?? current.inbox ?? current.cart ?? current.pass
    }

    private var cartLine: String {
        var line = lastCartTaken.map { "cart: last taken at \($0.at), \($0.produced)" } ?? "cart: none taken yet"
        if let read = lastCartRead, read.at != lastCartTaken?.at {
            line += read.produced == "rejected" ? "; rejected at \(read.at): \(read.error)" : "; read again at \(read.at), unchanged (nothing new for Mealz)"
        }
        return line
    }

    private func pendingDelta(_ id: ExactID) -> Int { pendingDeltas[id] ?? 0 }

    private func seconds(_ interval: Double) -> String {
        let tenths = (interval * 10).rounded() / 10
        return "\(tenths) s"
    }

    /// The report for people.
    public var human: String {
        var lines: [String] = []
        lines.append("sync directory \(directory) (id \(state.syncId))")
        if let configurationProblem {
            lines.append("configuration: BROKEN, every other command but push refuses (78) until it is mended; this report shows the defaults: \(configurationProblem)")
        }
        let from = switch storeSource {
        case "tree": "; the tree's default, set on the root (set-store on this cart gives it its own)"
        case "own" where isTreeCart: "; this cart's own, set on it"
        default: ""
        }
        lines.append("store: \(state.storeId ?? "none") (\(state.mode.rawValue) mode), Mealz basket \(state.basket)\(from)")
        if let synced = state.hostSyncedThrough {
            lines.append("host: acknowledges with syncedThrough, last \(synced)")
        } else {
            lines.append("host: has never written syncedThrough; batches wait \(state.pending.isEmpty ? "up to the pending window" : "for their window") for an echo")
        }
        if let hostProgress {
            lines.append("host progress: \(hostProgress) of \(state.lastOutboxSeq) (apply starts after it, wait lists the records after it)")
        } else {
            lines.append("host progress: unknown here (the database is read without its last commits)")
        }
        let ids = mealzIds
        lines.append(ids.isEmpty ? "Mealz-related lines: none" : "Mealz-related lines:")
        for id in ids {
            let pending = pendingDelta(id)
            lines.append("  \(id): Mealz's share \(state.confirmed[id] ?? 0), WebView's basis \(view[id] ?? 0)\(pending == 0 ? "" : " (pending \(pending > 0 ? "+" : "")\(pending))"), host cart \(state.hostCart?[id] ?? 0)")
        }
        lines.append(state.pending.isEmpty ? "pending batches: none" : "pending batches:")
        for batch in state.pending {
            let change = batch.products.map { "\($0.id) \($0.quantity > 0 ? "+" : "")\($0.quantity)" }.joined(separator: ", ")
            let wait = batch.deadline.map { "window closes in \(seconds($0.timeIntervalSince(now)))" } ?? "waits for syncedThrough ≥ \(batch.seq)"
            // A clock set back makes no negative age.
            lines.append("  #\(batch.seq) {\(change)}, age \(seconds(max(0, now.timeIntervalSince(batch.at)))), \(wait)")
        }
        if let last = lastLines[.notifications] {
            lines.append("last notification: \(String(decoding: last.dropLast(), as: UTF8.self))")
        } else {
            lines.append("last notification: none yet (no cart taken)")
        }
        // The last seq of each file, not a count: retention drops old records, an adoption starts high.
        lines.append("last seq: outbox #\(counts[.outbox] ?? 0), notifications #\(counts[.notifications] ?? 0), payments #\(counts[.payments] ?? 0)")
        lines.append(cartLine)
        lines.append(health.text)
        if let agentWatch {
            lines.append("watch: \(agentWatch.text)")
        } else if let watch {
            lines.append("watch: no agent runs; one started now would use \(watch.description)")
        } else if configurationProblem != nil {
            lines.append("watch: no agent runs; none can start until the configuration is mended")
        } else if let watchProblem {
            lines.append("watch: no agent runs; none can start: \(watchProblem)")
        }
        lines.append("database: \(database.path)\(database.warning.map { " — WARNING: \($0)" } ?? "")")
        let taken = retentionDays.map { "\(inboxTaken) taken within the retention (\(SyncEngine.shownDays($0)))" } ?? "\(inboxTaken) taken"
        let oldest = oldestWaiting.map { " (the oldest for \(Int($0.rounded())) s)" } ?? ""
        lines.append("inbox: \(taken), \(inboxDuplicates) duplicate deliveries (acknowledged, not done again), \(inboxWaiting) waiting in new/\(oldest), \(inboxBad) in bad/")
        if let inboxProblem { lines.append("inbox unusable: \(inboxProblem)") }
        if let orderUnknown { lines.append("inbox order: at \(orderUnknown.at), \(orderUnknown.message)") }
        for problem in databaseBehind { lines.append("database behind the files: \(problem)") }
        for problem in foreignParts { lines.append("a rotated part that is not basket-sync's: \(problem)") }
        let c = state.counters
        lines.append("counters: \(c.updateBaskets) updateBasket, \(c.redirects) redirects, \(c.settled) settled, \(c.rolledBack) rolled back, \(c.ignored) ignored (no synchronizer), \(c.paymentsRecorded) payments recorded, \(c.paymentsSkipped) skipped, \(c.duplicatePayments) duplicate payments, \(c.duplicateTransfers) duplicate transfers")
        lines.append("anomalies: \(c.lateEchoes) late echoes, \(c.lateAcknowledgements) late acknowledgements, \(c.acknowledgementsBeyondOutbox) acknowledgements beyond the outbox, \(c.acknowledgementsWentBack) acknowledgements going back, \(c.staleStates) stale basket states")
        if !databaseBehind.isEmpty {
            lines.append("last error: the database is behind the files (above): still current")
        } else if let storageFull {
            lines.append("last error: now: \(storageFull) (still current)")
        } else if let blocked = rotationBlocked.first {
            lines.append("last error: now: \(blocked) (still current)")
        } else if let error = errors.first(where: { $0.level == "error" }) {
            lines.append("last error: \(error.at) \(error.message) (\(standing(of: error).note))")
        } else {
            lines.append("last error: none")
        }
        // Ids and messages come from files others write: each line stays one line.
        return lines.map(JSONWriter.printable).joined(separator: "\n") + "\n"
    }

    /// `status --json`'s `"database"`: `{path, warning}`.
    static func write(_ database: (path: String, warning: String?), into writer: inout JSONWriter) {
        writer.object { object in
            object.member("path", database.path)
            // Why where it is puts it at risk (a network file system), or null.
            object.member("warning", database.warning)
        }
    }

    /// The report for scripts: one JSON object.
    public var json: String {
        let lastError = errors.first { $0.level == "error" }
        var writer = JSONWriter()
        writer.object { object in
            object.member("directory", directory)
            object.member("syncId", state.syncId)
            object.member("storeId", state.storeId)
            object.member("mode", state.mode.rawValue)
            object.member("storeSource", storeSource)
            object.member("basket", state.basket)
            object.member("syncedThrough", state.hostSyncedThrough)
            // The one host progress: apply starts after it, wait lists the records after it.
            object.member("hostProgress", hostProgress)
            // Why basket-sync.json cannot be used, or null; when it is a string, the report shows the defaults.
            object.member("configurationError", configurationProblem)
            object.member("database") { writer in CartStatus.write(database, into: &writer) }
            if let watch {
                object.member("watch") { writer in
                    writer.object { object in
                        object.member("mode", watch.polls ? "poll" : "inotify")
                        object.member("intervalMs", watch.intervalMs)
                        object.member("reason", watch.reason)
                        // The running agent (its pid and how it said it watches), or null: then
                        // mode, intervalMs and reason are what one started now would use.
                        object.member("agent") { WatchChoice.RunningAgent.write(agentWatch, into: &$0) }
                    }
                }
            }
            object.member("mealz") { writer in
                writer.array(mealzIds) { writer, id in
                    writer.object { line in
                        line.member("id", id.string)
                        line.member("share", state.confirmed[id] ?? 0)
                        line.member("basis", view[id] ?? 0)
                        line.member("pending", pendingDelta(id))
                        line.member("host", state.hostCart?[id] ?? 0)
                    }
                }
            }
            object.member("pending") { writer in
                writer.array(state.pending) { writer, batch in
                    writer.object { line in
                        line.member("seq", batch.seq)
                        line.member("ageSeconds") { $0.raw(text: String(max(0, now.timeIntervalSince(batch.at)))) }
                        line.member("deadline", batch.deadline.map(Timestamp.text))
                        line.member("products", products: batch.products)
                    }
                }
            }
            object.member("lastNotification") { writer in
                if let last = lastLines[.notifications] { writer.raw(text: String(decoding: last.dropLast(), as: UTF8.self)) } else { writer.raw("null") }
            }
            object.member("records") { writer in
                writer.object { records in
                    records.member("outbox", counts[.outbox] ?? 0)
                    records.member("notifications", counts[.notifications] ?? 0)
                    records.member("payments", counts[.payments] ?? 0)
                }
            }
            object.member("inbox") { writer in
                writer.object { inbox in
                    inbox.member("taken", inboxTaken)
                    inbox.member("duplicates", inboxDuplicates)
                    inbox.member("waiting", inboxWaiting)
                    inbox.member("bad", inboxBad)
                    inbox.member("problem", inboxProblem)
                }
            }
            object.member("databaseBehind") { writer in writer.array(databaseBehind) { $0.string($1) } }
            object.member("foreignParts") { writer in writer.array(foreignParts) { $0.string($1) } }
            object.member("counters") { writer in
                let c = state.counters
                writer.object { counters in
                    counters.member("updateBaskets", c.updateBaskets)
                    counters.member("redirects", c.redirects)
                    counters.member("notifications", c.notifications)
                    counters.member("settled", c.settled)
                    counters.member("rolledBack", c.rolledBack)
                    counters.member("lateEchoes", c.lateEchoes)
                    counters.member("ignored", c.ignored)
                    counters.member("paymentsRecorded", c.paymentsRecorded)
                    counters.member("paymentsSkipped", c.paymentsSkipped)
                    counters.member("duplicatePayments", c.duplicatePayments)
                    counters.member("duplicateTransfers", c.duplicateTransfers)
                    counters.member("lateAcknowledgements", c.lateAcknowledgements)
                    counters.member("acknowledgementsBeyondOutbox", c.acknowledgementsBeyondOutbox)
                    counters.member("acknowledgementsWentBack", c.acknowledgementsWentBack)
                    counters.member("staleStates", c.staleStates)
                }
            }
            object.member("orderUnknown") { writer in
                guard let orderUnknown else { return writer.raw("null") }
                writer.object { order in
                    order.member("at", orderUnknown.at)
                    order.member("message", orderUnknown.message)
                }
            }
            object.member("lastError") { writer in
                guard let lastError else { return writer.raw("null") }
                let standing = standing(of: lastError)
                writer.object { error in
                    error.member("at", lastError.at)
                    error.member("message", lastError.message)
                    error.member("current", standing.current)
                    error.member("standing", standing.note)
                }
            }
            object.member("cart") { writer in
                writer.object { cart in
                    cart.member("takenAt", lastCartTaken?.at)
                    cart.member("produced", lastCartTaken?.produced)
                    cart.member("readAt", lastCartRead?.at)
                    cart.member("read", lastCartRead?.produced)
                    cart.member("error", lastCartRead.flatMap { $0.error.isEmpty ? nil : $0.error })
                }
            }
            object.member("lastWholePass", health.lastWholePass ?? lastGoodPass)
            // The health of docs/spec.md §12: the agent, the oldest waiting event and pending
            // batch, every current error on its own.
            object.member("health") { writer in
                writer.object { object in
                    health.write(into: &object)
                    object.member("oldestWaitingSeconds") { $0.raw(text: oldestWaiting.map { AgentConfiguration.number(($0 * 10).rounded() / 10) } ?? "null") }
                    object.member("oldestPendingAt", state.pending.map(\.at).min().map(Timestamp.text))
                    let current = currentErrors
                    object.member("errors") { writer in
                        writer.object { errors in
                            errors.member("cart", current.cart)
                            errors.member("inbox", current.inbox)
                            errors.member("database", current.database)
                            errors.member("pass", current.pass)
                        }
                    }
                }
            }
        }
        writer.raw("\n")
        return writer.text
    }
}
