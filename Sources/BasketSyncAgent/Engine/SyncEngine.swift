import BasketSync
import BasketSyncWire

/// Runs the library against one sync directory — the one funnel of every state change.
///
/// ``step(_:record:)`` loads the state, runs one input on the machine, runs the effects it returns
/// (in the one exhaustive `switch` over ``SyncEffect``), commits, then appends the projections and
/// logs. Shared by `watch` (through ``pass(_:)``) and every one-shot command.
public final class SyncEngine {
    /// The sync directory, where its files are reached (a tree's cart: its folder as opened,
    /// `/proc/self/fd/N/.`, never followed through a link).
    public let directory: String
    /// The sync directory as people know it, for messages and the configuration.
    public var shownDirectory: String { store.shownDirectory }
    /// The settings from `basket-sync.json`.
    public internal(set) var configuration: AgentConfiguration {
        didSet {
            // What was read under the old reading says nothing of the new (keys, limits, links):
            // the version last read is read and judged again, stricter or looser, as a start would.
            if CartReader.readingHash(configuration) != CartReader.readingHash(oldValue) {
                cartReader = CartReader()
                largeCart = nil
            }
        }
    }
    /// ``CartReader/readingHash(_:)`` of ``configuration`` (kept there for the settings last
    /// asked of: a cart read is not a description of the configuration).
    var readingHash: Int64 { CartReader.readingHash(configuration) }
    /// Whether the outbox synchronizer is registered (`--no-synchronizer` leaves it out).
    public let isSynchronizerRegistered: Bool
    package let store: Store
    let logger: Logger
    let inbox: Inbox
    var cartReader = CartReader()
    /// Whether a cart version that does not parse is rejected only once it has stayed as it is
    /// for ``rejectionSettleSeconds`` (the agent, which reads again); one-shot commands reject at once.
    public var settlesRejections = false
    /// The version that did not parse, waiting to settle, and since when (monotonic seconds).
    var unsettled: (identity: FileIdentity, since: Double)?
    private var files: [Projection: JSONLinesFile] = [:]
    /// The next pending-window deadline, as the machine's timer effects last said; another
    /// process's commit makes it stale until ``refreshDeadline()``.
    public private(set) var nextDeadline: Date? {
        didSet { deadlineKnown = true }
    }
    /// The wall clock less the boot clock that ``nextDeadline``'s windows were placed by: the
    /// step's own reading, or the clock note read with the deadline (nil: none of this boot).
    private var deadlineOffset: Double?
    /// ``nextDeadline`` on the boot clock (seconds): placed by the offset its windows were set
    /// under, never by the wall clock read later — a step of the wall clock between the pass and
    /// this reading moves the deadline nowhere (the pass after the deadline moves the windows).
    public var nextDeadlineOnBootClock: Double? {
        nextDeadline.map { $0.timeIntervalSince1970 - (deadlineOffset ?? Self.clockOffset(Date())) }
    }
    /// The next deadline as committed, with the offset its windows were placed by (inside the
    /// caller's read).
    private func committedDeadline() throws(AgentError) -> (Date?, Double?) {
        guard let deadline = try store.nextDeadline() else { return (nil, nil) }
        return (deadline, Store.offsetOfThisBoot(try store.note(.clock)))
    }
    /// Whether ``nextDeadline`` was learnt (a step, or read from the database): a new engine of a
    /// tree's cart, made after the last was dropped, must read it before a pass trusts it.
    private var deadlineKnown = false
    /// What the last step's machine left to spare the next one work, the database's count of
    /// rollbacks then (a step rolled back since leaves it unused) and the store's state
    /// generation (its windows only for the state the step left).
    private var machineMemo: (memo: SyncStateMachine.Memo, rollbacks: Int, generation: Int)?
    /// A large cart as last read, and what its lines add up to per id (none at 0): the next
    /// version is read by its changed lines and summed from these (``CartStream``).
    var largeCart: (layout: CartStream.CartLayout, sums: [ExactID: Int])?
    /// The ids whose quantity the step's cart changed in the host cart, when the cart's step
    /// knows them from the changed lines (nil: the step compares the whole host cart).
    var hostCartTouched: [ExactID]?

    /// Reads the next deadline from the database unless this engine learnt it already (inside
    /// the caller's transaction, or on its own).
    func learnDeadline() throws(AgentError) {
        guard !deadlineKnown else { return }
        (nextDeadline, deadlineOffset) = try committedDeadline()
    }
    /// Whether each record made is logged (the agent's log, for a person following it).
    public var logsActivity = false
    /// When retention looks again for what is due, on the boot clock (nil: at the next pass).
    var retentionDue: Double?
    /// When retention looks again for temporaries a killed writer left, on the boot clock (nil:
    /// at its next slice).
    var temporariesDue: Double?
    /// The most inbox entries one pass goes through (nil: all): a tree's agent gives each cart a
    /// budget per turn, so that one cart's backlog delays the others by at most one budget.
    public var inboxBudget: Int?
    /// The entries a budget left waiting, in delivery order: the next pass goes on with them
    /// before listing `new/` again.
    var inboxBacklog: ArraySlice<String> = []
    /// An inbox entry taken or refused that could not leave `new/` (`cur/` or `bad/` not
    /// writable): the pass ends with this error once the rest of it went through, so the agent
    /// tries again after its back-off rather than at once (the entry would be read again at every
    /// wake-up), and status says it while the entry waits.
    var inboxStuck: AgentError?
    /// The entries a pass listed but could not place yet (before their report, or renamed in
    /// while it listed), with the look that first held them: the next look places them, or takes
    /// them all the same (docs/spec.md §4 rule 6).
    var inboxUnreported: [ExactID: Int] = [:]
    /// The notes of files given nothing, empty, kept for the group's transaction while a grouped
    /// pass is prepared (nil otherwise).
    var emptyNotes: [Projection: AppendCursor]?
    /// The group of carts this engine's appends are part of, while the agent finishes one: the
    /// writers' lock is then held, and the note of what a file was given kept, until the group's
    /// end (see ``HeldNotes``).
    var heldNotes: HeldNotes?
    /// How long this engine waits for its cart's writers' lock held by another process before
    /// its catch-up fails as busy (75): ``writersLockWait`` for a command; the agent serving a
    /// tree waits a moment only, so that one cart held up holds up no other; `apply` waits its
    /// `--timeout`.
    var writersLockWait = SyncEngine.writersLockWait
    /// How long a command waits for a cart's writers' lock that another process holds: its
    /// catch-ups hold it for moments.
    static let writersLockWait = 10.0

    /// Opens the sync directory's database (creating it when `create`) and reads the configuration.
    /// In a cart of a tree (`-C ROOT/ID`), the tree's database and settings; `makeCart` makes the
    /// cart's directory when it does not exist.
    public convenience init(directory: String, isSynchronizerRegistered: Bool, logger: Logger, create: Bool = false, makeCart: Bool = false) throws(AgentError) {
        let configuration = try AgentConfiguration.load(directory: directory)
        let store = try Store.open(directory: directory, create: create, makeCart: makeCart)
        self.init(store: store, configuration: configuration, isSynchronizerRegistered: isSynchronizerRegistered, logger: logger)
    }

    /// The engine of the cart `store` holds, under `configuration`.
    init(store: Store, configuration: AgentConfiguration, isSynchronizerRegistered: Bool, logger: Logger) {
        precondition(store.cart == 0 || store.folder != nil, "a tree's cart is served through its folder as opened")
        directory = store.directory
        self.isSynchronizerRegistered = isSynchronizerRegistered
        self.logger = logger
        inbox = Inbox(directory: "\(directory)/inbox")
        self.configuration = configuration
        self.store = store
        for projection in Projection.allCases {
            files[projection] = JSONLinesFile(path: "\(directory)/\(projection.fileName)")
        }
    }

    /// Appends not flushed yet are flushed when the engine goes (a failure leaves them to the
    /// rule of lines a restart of the machine took: looked for and written again).
    deinit { try? flush() }

    /// Reads `basket-sync.json` again (SIGHUP); on error keeps the settings in force.
    public func reloadConfiguration() throws(AgentError) {
        configuration = try AgentConfiguration.load(directory: shownDirectory)
    }

    /// The cart's path.
    public var cartPath: String { "\(directory)/\(configuration.cart)" }

    // MARK: The funnel

    /// What the effects of one step amount to, for the caller that needs more than the state.
    struct StepSummary {
        /// The outbox records made.
        var outbox: [OutboxRecord] = []
        /// The payment recorded (or recorded as skipped).
        var payment: PaymentRecord?
        /// The order already recorded, and its payment seq, when a `handlePayment` was a repeat.
        var alreadyRecorded: (orderId: String, seq: UInt64)?
        /// Deltas not delivered: no synchronizer registered.
        var ignored = false
        /// A transfer that had already landed.
        var duplicateTransfer = false
        /// The projections that got new lines.
        var touched: Set<Projection> = []
        /// The records made, in the order made: appended after the commit without reading them back.
        var made: [(projection: Projection, seq: UInt64, line: [UInt8])] = []
        /// The notification written, if any.
        var notified: UInt64?
        /// Whether the state changed (something settled, a cart or a claim taken that differs).
        var stateChanged = false
        /// What to log, and keep for `status`.
        var reports: [(level: Logger.Level, message: String)] = []
        /// One line per record made, for a person following the agent's log (not kept).
        var activity: [(message: String, record: [UInt8])] = []
    }

    /// Runs one input in one transaction: loads the state, runs `body` on the machine, runs its
    /// effects, lets `record` store what belongs with them, saves the state and commits; then
    /// appends the projections and logs.
    ///
    /// The ids of past orders and transfers live in indexed tables, not in the state: the one an
    /// input may repeat (`order`, `transfer`) is looked up and put in the state the machine sees,
    /// and the ones it adds go back to their tables when the state is saved.
    @discardableResult
    func step(
        order: String? = nil, transfer: String? = nil,
        _ body: (inout SyncStateMachine, Date) throws(AgentError) -> [SyncEffect],
        record: (StepSummary) throws(AgentError) -> Void = { _ in }
    ) throws(AgentError) -> StepSummary {
        let summary = try store.withTransaction { () throws(AgentError) in
            try stepInTransaction(order: order, transfer: transfer, body, record: record)
        }
        try finish([summary])
        return summary
    }

    /// The part of a step inside the caller's transaction: loads the state, runs the input and its
    /// effects, stores what belongs with them and saves the state. Nothing is logged or appended
    /// yet: ``finish(_:)`` does that once the transaction committed.
    func stepInTransaction(
        order: String? = nil, transfer: String? = nil,
        _ body: (inout SyncStateMachine, Date) throws(AgentError) -> [SyncEffect],
        record: (StepSummary) throws(AgentError) -> Void = { _ in }
    ) throws(AgentError) -> StepSummary {
        let now = Date()
        hostCartTouched = nil
        // The state taken, not copied (in a group, the group's so far): the machine keeps what
        // undoes its pending batches instead (appends only: nothing), and the state goes back
        // to the store however the step ends — its savepoint undoes a step that failed.
        var machine = SyncStateMachine(
            state: try store.takeState(), configuration: configuration.syncConfiguration,
            isSynchronizerRegistered: isSynchronizerRegistered)
        machine.keepPendingUndo()
        do {
            return try step(&machine, at: now, order: order, transfer: transfer, body, record: record)
        } catch {
            store.giveBack(machine.state, undo: machine.pendingUndo)
            throw error
        }
    }

    /// ``stepInTransaction(order:transfer:_:record:)`` once the machine has the state.
    private func step(
        _ machine: inout SyncStateMachine, at now: Date, order: String?, transfer: String?,
        _ body: (inout SyncStateMachine, Date) throws(AgentError) -> [SyncEffect],
        record: (StepSummary) throws(AgentError) -> Void
    ) throws(AgentError) -> StepSummary {
        // The wall clock less the boot clock, read with `now` (one instant): the step decides
        // and notes with this one reading, whatever the step's own work takes.
        let offset = Self.clockOffset(now)
        // What the last machine left: its windows only for the very state it left (not one read
        // again, or saved by another machine since).
        if let kept = machineMemo, kept.rollbacks == store.database.rollbacks {
            machine.memo = kept.generation == store.stateGeneration ? kept.memo : kept.memo.forgettingWindows
        }
        let clockStep = try Self.clockStep(machine.state, store: store, offset: offset)
        if let clockStep { machine.movePendingTimes(by: clockStep) }
        let recorded = try order.flatMap { (order) throws(AgentError) in try store.orderSeq(order).map { (ExactID(order), $0) } }
        let landed = try transfer.flatMap { (transfer) throws(AgentError) in try store.transferLanded(transfer) ? ExactID(transfer) : nil }
        machine.know(order: recorded, landedTransfer: landed)
        // The state before, to tell whether the step changed it — without its pending batches,
        // which it would hold (the step's first append would then copy every one of them);
        // whether they changed is the machine's undo's to say.
        var before = machine.state
        before.pending = []
        var deadline = machine.knowNextDeadline()
        var effects: [SyncEffect] = []
        // A cart of a tree that never set its own store follows the tree's default (set-store on the root).
        if store.cart != 0, try store.note(.ownStore) == nil, let (storeId, mode) = try Tree.defaultStore(store.database),
           !machine.state.storeId.isByteEqual(to: storeId) || mode != machine.state.mode {
            effects = machine.setSelectedStore(externalId: storeId, mode: mode, at: now)
        }
        effects += try body(&machine, now)
        // No record is numbered past the largest seq (none reads it as one): the step is undone
        // with its transaction.
        if max(machine.state.lastOutboxSeq, machine.state.lastNotificationSeq, machine.state.lastPaymentSeq, machine.state.basket) > SyncState.largestSeq,
           let (name, _) = [("outbox", machine.state.lastOutboxSeq), ("notifications", machine.state.lastNotificationSeq), ("payments", machine.state.lastPaymentSeq), ("basket", machine.state.basket)]
               .first(where: { $0.1 > SyncState.largestSeq }) {
            throw .refused("\(shownDirectory): the \(name) numbers have reached \(SyncState.largestSeq), the largest seq basket-sync gives (no JSON reader keeps one past it exact): nothing more can be numbered here; start a new sync directory for this cart")
        }
        var summary = try run(effects, deadline: &deadline)
        if let clockStep {
            summary.reports.append((.warning, "the wall clock was stepped by \(Int(clockStep.rounded())) s since the pending batches were made: their windows moved with it (a window lasts its seconds, whatever the clock is set to)"))
        }
        try noteClock(machine.state.pending, offset: offset, stepped: clockStep != nil)
        // The host cart (as large as the cart) is compared once; the rest of the state is small.
        // The ids that changed, from the large-cart reader or from one walk of the two carts: the
        // host cart is then saved as its changes while they stay few, not encoded whole.
        let touched = hostCartTouched ?? Self.changedIds(before.hostCart, machine.state.hostCart)
        hostCartTouched = nil
        let cartChanged = touched.map { !$0.isEmpty } ?? (machine.state.hostCart != before.hostCart)
        var rest = machine.state, restBefore = before
        rest.hostCart = nil
        restBefore.hostCart = nil
        rest.pending = []
        summary.stateChanged = cartChanged || machine.pendingUndo?.changed(machine.state.pending) != false || rest != restBefore || clockStep != nil
        if let record = summary.outbox.first { try observeCart(atBatch: record.seq) }
        for report in summary.reports { try store.report(level: report.level.rawValue, message: report.message, at: now) }
        try record(summary)
        if summary.stateChanged {
            try store.saveState(machine.state, hostCartChanged: cartChanged, hostCartTouched: touched, undo: machine.pendingUndo)
        } else {
            store.giveBack(machine.state, undo: machine.pendingUndo)
        }
        machineMemo = (machine.memo, store.database.rollbacks, store.stateGeneration)
        (nextDeadline, deadlineOffset) = (deadline, offset)
        return summary
    }

    /// The ids whose quantity differs between two host carts (an id absent from one of them
    /// included); nil when either is nil.
    static func changedIds(_ before: [ExactID: Int]?, _ after: [ExactID: Int]?) -> [ExactID]? {
        guard let before, let after else { return nil }
        var changed: [ExactID] = []
        var common = 0
        for (id, quantity) in after {
            guard let was = before[id] else {
                changed.append(id)
                continue
            }
            common += 1
            if was != quantity { changed.append(id) }
        }
        if common < before.count {
            for id in before.keys where after[id] == nil { changed.append(id) }
        }
        return changed
    }

    /// After the steps' transaction committed: their logs, then one append (and fsync) per JSON
    /// Lines file they gave new lines to.
    func finish(_ summaries: [StepSummary]) throws(AgentError) {
        var touched: Set<Projection> = []
        for summary in summaries { touched.formUnion(summary.touched) }
        // The lines first, then the log: a reader waits for the line, not for the log (a slow
        // journal or a full pipe on standard error delays only what is said of it).
        var failure: AgentError?
        for projection in Projection.allCases where touched.contains(projection) && failure == nil {
            let made = summaries.flatMap { $0.made.lazy.filter { $0.projection == projection }.map { (seq: $0.seq, line: $0.line) } }
            do { try publish(projection, recordMade: true, made: made) } catch { failure = error }
        }
        for summary in summaries {
            for report in summary.reports { logger.log(report.level, report.message) }
            if logsActivity { for line in summary.activity { logger.log(.info, line.message, record: line.record) } }
        }
        if let failure { throw failure }
    }

    /// What is said of the batches a step rolled back: a line each for a few; one line for more
    /// (a backlog's windows closing together), their seqs as ranges — a line each would flood
    /// the log and the reports a cart keeps with thousands of the same words.
    static func rolledBackReports(_ seqs: [UInt64], window: Double) -> [(level: Logger.Level, message: String)] {
        let advice = "write syncedThrough in the cart to be waited for"
        guard seqs.count > 3 else {
            return seqs.map { (.warning, "batch #\($0) rolled back: the host did not echo it within \(window) s; \(advice)") }
        }
        var ranges: [(first: UInt64, last: UInt64)] = []
        for seq in seqs.sorted() {
            if let last = ranges.last?.last, seq == last + 1 { ranges[ranges.count - 1].last = seq } else { ranges.append((seq, seq)) }
        }
        let shown = ranges.prefix(8).map { $0.first == $0.last ? "#\($0.first)" : "#\($0.first)–#\($0.last)" }.joined(separator: ", ")
        let more = ranges.count > 8 ? " and \(ranges.count - 8) more ranges" : ""
        return [(.warning, "\(seqs.count) batches rolled back (\(shown)\(more)): the host did not echo them within \(window) s; \(advice)")]
    }

    /// Runs the effects, in order, inside the step's transaction: every effect is decided here.
    private func run(_ effects: [SyncEffect], deadline: inout Date?) throws(AgentError) -> StepSummary {
        var summary = StepSummary()
        var rolledBack: [UInt64] = []
        for effect in effects {
            switch effect {
            case let .outbox(record):
                let line = RecordFormat.line(record)
                let what = record.type == .updateBasket ? "updateBasket " + SyncEngine.shown(record.products, signed: true) : record.type.rawValue
                summary.activity.append(("outbox #\(record.seq) \(what)\(record.source.map { " from \($0)" } ?? "")", line))
                try store.insert(.outbox, seq: record.seq, line: line)
                summary.touched.insert(.outbox)
                summary.made.append((.outbox, record.seq, line))
                summary.outbox.append(record)
            case let .notify(notification):
                let line = RecordFormat.line(notification)
                let lines = notification.products.isEmpty ? "(no Mealz line)" : notification.products.map { "\($0.id)=\($0.quantity)" }.joined(separator: " ")
                summary.activity.append(("notify #\(notification.seq) \(lines)\(notification.syncedThrough.map { " st \($0)" } ?? "")", line))
                try store.insert(.notifications, seq: notification.seq, line: line)
                summary.touched.insert(.notifications)
                summary.made.append((.notifications, notification.seq, line))
                summary.notified = notification.seq
            case let .payment(payment):
                let line = RecordFormat.line(payment)
                let status = payment.status == .recorded ? "recorded" : "skipped (\(payment.reason?.rawValue ?? ""))"
                summary.activity.append(("payment #\(payment.seq) \(payment.type.rawValue) \(status)\(payment.orderId.map { " \($0)" } ?? "") \(payment.totalPrice)", line))
                try store.insert(.payments, seq: payment.seq, line: line)
                summary.touched.insert(.payments)
                summary.made.append((.payments, payment.seq, line))
                summary.payment = payment
            case .settled, .basketClosed, .storeChanged:
                // The state holds them (Mealz's share, the basket number, the store); `status` shows them.
                break
            case let .rolledBack(batch):
                rolledBack.append(batch.seq)
            case let .lateEcho(seq):
                summary.reports.append((.warning, "the host applied batch #\(seq) after its window: settled late; write syncedThrough in the cart to be waited for"))
            case let .lateAcknowledgement(seq):
                summary.reports.append((.warning, "the host acknowledged batch #\(seq) after its window: settled late"))
            case let .ignored(batch):
                summary.ignored = true
                summary.reports.append((.warning, "no synchronizer registered: ignored deltas\(batch.source.map { " from \($0)" } ?? "") (\(batch.products.count) lines)"))
            case let .acknowledgementBeyondOutbox(synced, last):
                summary.reports.append((.error, "\(cartPath): the cart says syncedThrough \(synced) but the outbox ends at \(last): it acknowledges nothing; is this cart from another sync directory, or the database reset? The records wait until a cart acknowledges them within the outbox"))
            case let .acknowledgementBeforeRecords(synced, writtenThrough):
                summary.reports.append((.error, "\(cartPath): the cart says syncedThrough \(synced) but it was written when the outbox ended at \(writtenThrough): a claim of records that did not exist acknowledges nothing (an old cart read late, or a counter ahead of what the host applied); the records wait until a cart written since acknowledges them"))
            case .acknowledgementMissing:
                summary.reports.append((.warning, "\(cartPath): the cart has no syncedThrough though this host acknowledges: it acknowledges nothing new, and what it shows settles nothing (it may be the shopper's own units); write syncedThrough in every cart"))
            case let .acknowledgementWentBack(synced, highest):
                summary.reports.append((.warning, "\(cartPath): the cart says syncedThrough \(synced), below the \(highest) it acknowledged before (an old cart restored?); nothing is undone, and apply does not apply those records again"))
            case let .staleState(basket, current):
                let why = basket < current ? "a payment or a store change closed it" : "no notification has said that basket yet"
                summary.reports.append((.warning, "a basketState based on basket \(basket) ignored: the current basket is \(current) (\(why)); the WebView sends the basket of the last notification it saw"))
            case let .clampedAtLimit(id, asked, recorded, limit):
                summary.reports.append((.warning, "Mealz asked \(JSONWriter.quoted(id)) \(asked > 0 ? "+" : "")\(asked), which would take the host's cart past maxQuantity \(limit) (with what is pending): recorded \(recorded == 0 ? "nothing for it" : "+\(recorded)"), so that the line lands at \(limit)"))
            case let .duplicateTransfer(transferId):
                summary.duplicateTransfer = true
                summary.reports.append((.info, "transfer \(transferId) already landed: not landed again"))
            case let .paymentAlreadyRecorded(orderId, seq):
                summary.alreadyRecorded = (orderId, seq)
                summary.reports.append((.info, "order \(orderId) already recorded as payment #\(seq): not recorded again"))
            case let .armTimer(at):
                deadline = at
            case .disarmTimer:
                deadline = nil
            }
        }
        summary.reports += SyncEngine.rolledBackReports(rolledBack, window: configuration.pendingTimeoutSeconds)
        return summary
    }

    /// Remembers which version of the cart file stood when record `seq` was committed, unless the
    /// same version was remembered at an earlier record: a cart read later that is still that
    /// version was written before the record, and can neither acknowledge nor echo it.
    /// A version whose times are whole seconds and that changed within the last two is not
    /// remembered: a write in place of the same size in that second would look the same, and
    /// an honest cart written after the record would be taken for one written before it.
    private func observeCart(atBatch seq: UInt64) throws(AgentError) {
        let identity = CartReader.identity(cartPath)
        if let observed = try store.cartAtBatch(), observed.identity == identity { return }
        if let identity, identity.mayChangeUnseen(nowNanoseconds: Int64(Date().timeIntervalSince1970 * 1e9)) { return }
        // The version last read, when it is the one on disk: its bytes' hash, so that the same
        // bytes under another inode or other times are known as this version.
        let seen = try store.note(.cartSeen).flatMap(CartReader.Seen.init(text:))
        try store.setCartAtBatch(identity: identity, seq: seq, bytesHash: seen?.identity == identity ? seen?.bytesHash : nil)
    }

    /// The wall clock less the boot clock: it changes only when the wall clock is stepped. Called
    /// right after `now` is read, so that both clocks are read at one instant: a step that takes
    /// seconds (a large cart, a loaded machine) is no step of the clock.
    static func clockOffset(_ now: Date) -> Double { now.timeIntervalSince1970 - Posix.bootSeconds() }

    /// A step of the wall clock since the pending batches' windows were set (on this boot): the
    /// windows move with it, so that a window lasts its seconds whatever the clock is set to
    /// (set back, a window would stay open as long; set forward, it would close at once).
    /// Returns the step, in seconds, when there was one. Inside the caller's transaction (`status`
    /// shows the windows as the next step will see them). `offset`: ``clockOffset(_:)`` read at
    /// one instant with the step's `now` — the same reading the step notes with.
    static func followClockSteps(_ machine: inout SyncStateMachine, store: Store, offset now: Double) throws(AgentError) -> Double? {
        guard let step = try clockStep(machine.state, store: store, offset: now) else { return nil }
        machine.movePendingTimes(by: step)
        return step
    }

    /// How far the wall clock was stepped since `state`'s pending windows were set, when by more
    /// than a second on this boot (nil: nothing to move; see ``followClockSteps(_:store:offset:)``).
    static func clockStep(_ state: SyncState, store: Store, offset now: Double) throws(AgentError) -> Double? {
        guard !state.pending.isEmpty, let offset = Store.offsetOfThisBoot(try store.note(.clock)) else { return nil }
        let step = now - offset
        return abs(step) > 1 ? step : nil
    }

    /// Whether the wall clock was stepped since the pending batches' windows were set (on this boot).
    func clockStepped() throws(AgentError) -> Bool {
        guard let offset = Store.offsetOfThisBoot(try store.withTransaction({ () throws(AgentError) in try store.note(.clock) })) else { return false }
        return abs(Self.clockOffset(Date()) - offset) > 1
    }

    /// Keeps the clock's offset beside pending batches (see ``followClockSteps(_:store:offset:)``):
    /// written when batches are pending and it is missing, of another boot, or stepped.
    private func noteClock(_ pending: [PendingBatch], offset: Double, stepped: Bool) throws(AgentError) {
        guard !pending.isEmpty else { return }
        if !stepped, try clockNoted(offset: offset) { return }
        try store.setNote(.clock, Store.bootOffsetNote(offset))
    }

    /// Whether the clock's offset kept is this boot's and the wall clock was not stepped since
    /// (`offset`: ``clockOffset(_:)`` now): a step has nothing to move or note.
    func clockNoted(offset: Double) throws(AgentError) -> Bool {
        guard let known = Store.offsetOfThisBoot(try store.note(.clock)) else { return false }
        return abs(known - offset) <= 1
    }

    /// Whether a file has appends not flushed yet.
    var hasUnflushed: Bool { files.values.contains { $0.unsyncedDescriptor != nil } }

    /// Hands every file's appends not flushed yet to a flush (see ``JSONLinesFile/takeUnflushed()``).
    func takeUnflushed() -> [(Projection, JSONLinesFile.Flush)] {
        Projection.allCases.compactMap { projection in files[projection]!.takeUnflushed().map { (projection, $0) } }
    }

    /// Notes, inside the caller's transaction, that `store`'s flushes are durable.
    /// After flushes of this engine's files returned: its files remember it (see ``JSONLinesFile/flushed(_:)``).
    func flushed(_ done: [(Projection, JSONLinesFile.Flush)]) {
        for (projection, flush) in done { files[projection]!.flushed(flush) }
    }

    static func noteFlushedInTransaction(_ store: Store, _ flushed: [(Projection, JSONLinesFile.Flush)]) throws(AgentError) {
        for (projection, flush) in flushed {
            if let note = JSONLinesFile.noteFlushed(flush.given, loaded: try store.given(projection)) { try store.noteGiven(projection, note) }
        }
    }

    /// After a flush of `store`'s file failed: its appends taken back, to be written again —
    /// under the writers' lock, waited for `waitingAtMost` seconds like a catch-up; while
    /// another process holds it longer, they stay (the failure is said all the same).
    static func takeBack(_ store: Store, _ projection: Projection, _ flush: JSONLinesFile.Flush, waitingAtMost: Double) {
        JSONLinesFile.takeBack(flush, lock: { () throws(AgentError) in try store.lock(Layout.projectionsLock, waitingAtMost: waitingAtMost) },
                               saveGiven: { (given) throws(AgentError) in try store.setGiven(projection, given) })
    }

    /// Flushes the appends not flushed yet: an fsync each, then one note (without its own
    /// fsync: the next commit makes it durable; lost, the lines are only looked for again after a
    /// restart of the machine). A failure takes the appends back and is thrown.
    public func flush() throws(AgentError) {
        let flushes = Projection.allCases.compactMap { projection in
            files[projection]!.unsyncedDescriptor.map { fd in (projection, fd, files[projection]!.takeUnflushed()) }
        }
        guard !flushes.isEmpty else { return }
        var done: [(Projection, JSONLinesFile.Flush)] = []
        var firstFailure: SystemError?
        for (projection, fd, flush) in flushes {
            guard let flush else { continue }
            do {
                try Posix.fsync(fd, path: flush.path)
                done.append((projection, flush))
            } catch {
                Self.takeBack(store, projection, flush, waitingAtMost: writersLockWait)
                if firstFailure == nil { firstFailure = error }
            }
        }
        if !done.isEmpty {
            try store.withQuickTransaction { () throws(AgentError) in try Self.noteFlushedInTransaction(store, done) }
            flushed(done)
        }
        if let firstFailure { throw .system(firstFailure) }
    }

    /// Catches one JSON Lines file up with the database. `recordMade`: a step just committed a
    /// record for it (the file is not asked first whether it is caught up: it is not, unless
    /// another process gave it the record since, which the catch-up finds); `made`: the records
    /// the steps just committed, in seq order (see ``JSONLinesFile/catchUp``).
    func publish(_ projection: Projection, recordMade: Bool = false, made: [(seq: UInt64, line: [UInt8])] = []) throws(AgentError) {
        let file = files[projection]!
        file.rotation = configuration.rotate
        // The common case, at a start or a commit signal: nothing to append, nothing opened.
        if !recordMade, try file.isCaughtUp(given: store.given(projection), lastDatabaseSeq: store.lastSeq(projection)) { return }
        let outcome: JSONLinesFile.Outcome
        do {
            outcome = try catchUp(file, projection, made: made)
        } catch {
            throw givenBackWhenNew(error)
        }
        report(outcome, of: file, projection)
    }

    private func catchUp(_ file: JSONLinesFile, _ projection: Projection, made: [(seq: UInt64, line: [UInt8])] = []) throws(AgentError) -> JSONLinesFile.Outcome {
        // Asked only when a line must be judged (a file not as given), never on an append.
        var syncId: String??
        return try file.catchUp(
            lock: { () throws(AgentError) in
                if let heldNotes { return try heldNotes.lock(store, waitingAtMost: writersLockWait) }
                return try store.lockProjections(waitingAtMost: writersLockWait)
            },
            unlock: { (fd) in if heldNotes == nil { store.unlockProjections(fd) } },
            loadGiven: { () throws(AgentError) in try store.given(projection) },
            saveGiven: { (given) throws(AgentError) in
                // A file given nothing, empty: its note waits for the group's transaction when
                // one is coming (see ``GroupedPass``); a group of carts being finished notes
                // every file at its end (see ``HeldNotes``).
                if emptyNotes != nil, given.seq == 0, given.size == 0 {
                    emptyNotes![projection] = given
                } else if let heldNotes {
                    heldNotes.note(store, projection, given)
                } else {
                    try store.setGiven(projection, given)
                }
            },
            lastDatabaseSeq: { () throws(AgentError) in try store.lastSeq(projection) },
            recordAt: { (seq) throws(AgentError) in try store.line(projection, seq: seq) },
            isRecord: { line in
                if syncId == nil { syncId = .some(ownSyncId(projection)) }
                return projection.isRecord(line, of: syncId!)
            },
            fetch: { (after) throws(AgentError) in try store.lines(projection, after: after) },
            made: made)
    }

    /// Logs what a catch-up of `file` did beyond appending.
    private func report(_ outcome: JSONLinesFile.Outcome, of file: JSONLinesFile, _ projection: Projection) {
        if outcome.truncatedBytes > 0 {
            logger.log(.warning, "\(file.path): cut a torn last line (\(outcome.truncatedBytes) bytes) left by a crash; its record is written again from the database")
        }
        if outcome.shrank {
            logger.log(.warning, "\(file.path): shrank under basket-sync (logrotate's copytruncate?): truncating a file another process appends to loses what is written between the copy and the cut — rotate with logrotate's create or nocreate, or basket-sync's own \"rotate\". What basket-sync can tell is missing after the newest rotated part is written again; a record appended between the copy and the cut may be in neither file (the database keeps it: basket-sync wait and apply still give it)")
        }
        if let (first, last) = outcome.reappended {
            logger.log(.warning, "\(file.path): records \(first)…\(last) had left the live files (the file basket-sync was writing was moved out of the rotated files — logrotate's create moving it aside to a .backup — or cut after a copy): written again here, so that the live files hold every record once")
        }
        if outcome.restarted, outcome.appended > 0 {
            logger.log(.info, "\(file.path): not the file given before (moved away, truncated or deleted): started again with record \(file.given!.seq - UInt64(outcome.appended) + 1)")
        }
        if let rotated = outcome.rotated {
            if rotated.isEmpty {
                logger.log(.info, "\(file.path): rotated to \(projection.fileName).1 past \(configuration.rotate?.maxBytes ?? 0) bytes; the next record starts a new file")
            } else {
                logger.log(.warning, "\(file.path): could not be rotated (\(rotated)); it grows until the next append tries again")
            }
        }
        // Said once ended: unfinished, it may still be being written.
        if outcome.foreignUnfinished > 0, outcome.appended > 0 {
            logger.log(.warning, "\(file.path): ended with an unfinished line (\(outcome.foreignUnfinished) bytes, no newline) that is not a record of basket-sync torn by a crash (another program wrote it): left alone, and ended with a newline so that the next record starts a line of its own")
        }
        // Said when found, whether or not a record follows at once: the file is then known as it
        // is, and the lines are not looked at again.
        if outcome.foreignTail {
            logger.log(.warning, "\(file.path): its last line is not a record of basket-sync (a blank, or a line another program wrote); left alone, the next records follow it")
        }
        if let seq = outcome.copiedTail {
            logger.log(.warning, "\(file.path): its last line is record \(seq) again, after a line of record \(seq) or later (the file was copied or edited by another program); left alone, the next records follow it")
        }
    }

    /// Catches every JSON Lines file up with the database (at start, and after another process committed).
    /// `readingDeadline`: the next pending-window deadline read again in the same read of the
    /// database (a pass's own: ``refreshDeadline()`` without a transaction of its own).
    public func publishAll(readingDeadline: Bool = false) throws(AgentError) {
        // The common case (a start, a commit signal): every file as it was given and given the
        // database's last record — judged from one read of the database (each statement alone
        // would take and let go SQLite's read lock: twelve of them a cart). A file caught up holds
        // nothing beyond the database, so neither check has more to do.
        let (known, deadline) = try store.database.withReadTransaction { () throws(AgentError) -> ([(AppendCursor?, UInt64)], (Date?, Double?)) in
            let deadline = readingDeadline ? try committedDeadline() : (nil, nil)
            var known: [(AppendCursor?, UInt64)] = []
            for projection in Projection.allCases { known.append((try store.given(projection), try store.lastSeq(projection))) }
            return (known, deadline)
        }
        if readingDeadline { (nextDeadline, deadlineOffset) = deadline }
        var caughtUp = true
        for (projection, (given, lastSeq)) in zip(Projection.allCases, known) {
            let file = files[projection]!
            file.rotation = configuration.rotate
            caughtUp = caughtUp && file.isCaughtUp(given: given, lastDatabaseSeq: lastSeq)
        }
        if caughtUp { return }
        try checkDatabaseNotBehind()
        for projection in Projection.allCases { try publish(projection) }
    }

    /// In a tree, a cart whose file holds records while the cart never gave that file anything (a
    /// directory copied in after the cart was made for it) did not lose its database: it is given back —
    /// its rows and marker removed — and refused as a directory new to the tree that holds
    /// records (73), which `init --adopt` takes. Any other error is returned as it is.
    func givenBackWhenNew(_ error: AgentError) -> AgentError {
        // The file ahead was never given a record by this cart: its records are another's.
        guard store.cart != 0, case let .databaseBehind(path, _, _) = error,
              let projection = Projection.allCases.first(where: { path.hasSuffix("/" + $0.fileName) }),
              let neverGiven = try? store.withTransaction({ () throws(AgentError) -> Bool in try (store.given(projection)?.seq ?? 0) == 0 }),
              neverGiven else { return error }
        do {
            try store.withTransaction { () throws(AgentError) in try store.database.removeCart(store.cart) }
            Posix.unlink(store.signalPath)
            store.database.signalCommit()
        } catch {
            return error
        }
        return .refused("\(shownDirectory): holds records (\(error.description)) written after the cart was made for it (copied or moved in): it is a directory new to the tree, given back. Run basket-sync -C \(shownDirectory) init --adopt to make it a cart that goes on after its records, or move its .jsonl files away to start it afresh")
    }

    /// Refuses (74) when any JSON Lines file holds a whole record beyond the database (it was
    /// lost, restored or replaced), before any file or the database is touched.
    func checkDatabaseNotBehind() throws(AgentError) {
        do { try checkFilesNotAhead() } catch { throw givenBackWhenNew(error) }
    }

    private func checkFilesNotAhead() throws(AgentError) {
        // A file still as it was given, at the size given, holds no more than the database did.
        try Integrity.checkNotBehind(directory, files: files, syncId: { (projection) throws(AgentError) in ownSyncId(projection) }, skip: { (projection, databaseSeq) throws(AgentError) in
            guard let given = try store.given(projection) else { return false }
            return given.seq <= databaseSeq && files[projection]!.isAsGiven(given)
        }, lastSeq: { (projection) throws(AgentError) in try store.lastSeq(projection) })
    }

    /// The sync id an outbox line of `projection`'s file must carry to be one of this
    /// directory's records: once the file was given records (before that, records copied in
    /// are held records, and a new cart holding them is given back for `init --adopt`).
    func ownSyncId(_ projection: Projection) -> String? {
        guard ((try? store.given(projection))??.seq ?? 0) > 0 else { return nil }
        return try? store.loadState().syncId
    }

    /// Records an error for `status` and logs it.
    func reportError(_ error: AgentError, logAs prefix: String = "") {
        logger.log(.error, prefix + error.description)
        keepForStatus(error)
    }

    /// Records an error for `status` without logging it (its caller says it).
    func keepForStatus(_ error: AgentError) {
        _ = try? store.withTransaction { () throws(AgentError) in
            try store.report(level: Logger.Level.error.rawValue, message: error.description, at: Date())
        }
    }

    /// Rolls back the batches whose pending window is over.
    public func expireWindows() throws(AgentError) {
        try step { (machine, now) throws(AgentError) in machine.expireWindows(at: now) }
    }

    /// Reads the next pending-window deadline again, as committed by any process.
    public func refreshDeadline() throws(AgentError) {
        (nextDeadline, deadlineOffset) = try store.database.withReadTransaction { () throws(AgentError) in try committedDeadline() }
    }

    /// The state as committed now.
    public func currentState() throws(AgentError) -> SyncState {
        try store.withTransaction { () throws(AgentError) in try store.loadState() }
    }

    /// The payment seq recorded for an order by `handlePayment`, if any (and retention kept it).
    func recordedPayment(orderId: String) throws(AgentError) -> UInt64? {
        try store.withTransaction { () throws(AgentError) in try store.orderSeq(orderId) }
    }

    /// The payment record `seq` as the database holds it; nil when it holds no such line.
    func paymentRecord(seq: UInt64) throws(AgentError) -> PaymentRecord? {
        guard let line = try store.withTransaction({ () throws(AgentError) in try store.line(.payments, seq: seq) }) else { return nil }
        return try? RecordFormat.payment(line)
    }

    /// Lines for a log: `sku-1 +2, sku-9 -1` (signed) or `sku-1=2`.
    static func shown(_ products: [RetailerProduct], signed: Bool) -> String {
        products.map { signed ? "\($0.id) \($0.quantity > 0 ? "+" : "")\($0.quantity)" : "\($0.id)=\($0.quantity)" }.joined(separator: ", ")
    }

    /// Tells a running agent that this process committed.
    public func signalCommit() { store.signalCommit() }

    /// Tells a running agent that this process committed, a tree's commit signal left to the
    /// caller (``Store/signalCommit(tellingTheTree:)``).
    func signalCommitLeavingTheTree() { store.signalCommit(tellingTheTree: false) }
}
