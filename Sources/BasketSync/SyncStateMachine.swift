/// The synchronization logic of one sync directory, as a value: one `mutating func` per input,
/// each returning the exact effects to run, in order.
///
/// It reads no file and no clock: every input carries its instant (`at`), and pending windows come
/// out as ``SyncEffect/armTimer(at:)`` and go back in as ``expireWindows(at:)``. Every input first
/// expires the windows that are over at its instant, so the outcome never depends on when a timer
/// happened to fire.
public struct SyncStateMachine: Sendable {
    /// The persistent state; save it after every input to resume after a restart.
    public internal(set) var state: SyncState
    /// The settings; a change applies to batches sent from then on.
    public var configuration: SyncConfiguration
    /// Whether a `RetailerBasketSynchronizer` is registered. Runtime only, as in the SDK: without
    /// one, Mealz deltas are ignored (and counted).
    public var isSynchronizerRegistered: Bool

    /// The host cart as last taken with the pending batches applied (``withinLimit(_:)``), kept
    /// from one input to the next while the pending batches only grew: a queue of events the
    /// host has not applied yet costs each event its own batch, not a walk over every batch.
    private var projected: ProjectedCart?

    /// What a machine keeps to spare the next input work (the host cart projected through the
    /// pending batches). A machine made for every input from the saved state is given the memo
    /// the previous one left (``memo``); one that does not match the state is not used. Never
    /// give one across a state that was rolled back: a seq given again could match it.
    public struct Memo: Sendable {
        fileprivate var projected: ProjectedCart?
        /// ``earliestKnown``, and the count, first and last seq of the pending batches it is of.
        fileprivate var earliest: (deadline: Date?, count: Int, firstSeq: UInt64?, lastSeq: UInt64?)?

        /// The same memo without what it knows of the pending windows: for a state whose
        /// windows may have changed otherwise than through the machine that left it (read
        /// again from storage, or saved by another machine).
        public var forgettingWindows: Memo { Memo(projected: projected, earliest: nil) }
    }

    /// The memo this machine leaves, or is given.
    public var memo: Memo {
        get {
            Memo(projected: projected, earliest: earliestKnown.map { ($0, state.pending.count, state.pending.first?.seq, state.pending.last?.seq) })
        }
        set {
            projected = newValue.projected
            if let earliest = newValue.earliest, earliest.count == state.pending.count,
               earliest.firstSeq == state.pending.first?.seq, earliest.lastSeq == state.pending.last?.seq {
                earliestKnown = .some(earliest.deadline)
            } else {
                earliestKnown = nil
            }
        }
    }

    /// The earliest pending window, when known (`.some(nil)`: no batch has one): kept up by
    /// appends, forgotten by any other change of the batches (``willRewritePending()``), and
    /// carried from one input to the next in the ``memo`` — a queue of events the host has not
    /// applied costs each event no walk over every batch.
    private var earliestKnown: Date??

    /// ``projected`` and what it was made from.
    fileprivate struct ProjectedCart: Sendable {
        /// The host cart it started from (compared whole; the same storage compares at once).
        var base: [ExactID: Int]?
        /// How many pending batches it has applied, and the seqs of the first and the last: seqs
        /// only grow, so the same count between the same first and last seqs is the same batches.
        var count: Int
        var firstSeq: UInt64
        var lastSeq: UInt64
        var cart: [ExactID: Int]
    }

    /// What the inputs since ``keepPendingUndo()`` changed in the pending batches, for a caller
    /// that may have to take an input back (the agent runs each event of a group under a
    /// savepoint): how many there were, and — once an input changes them otherwise than by
    /// appending — all of them as they were then. An input that only appends is undone by
    /// dropping what follows, so keeping the undo copies nothing (a queue of n events costs n
    /// appends, not n copies of every batch).
    package struct PendingUndo: Sendable {
        /// How many pending batches there were.
        package var count: Int
        /// The pending batches before the first change that was not an append; their first
        /// `count` are those there were. Nil while there were only appends.
        package var rewritten: [PendingBatch]?

        /// The pending batches as they were, given them as they are now.
        package func undo(_ now: [PendingBatch]) -> [PendingBatch] { Array((rewritten ?? now).prefix(count)) }

        /// Whether the pending batches now differ from those there were.
        package func changed(_ now: [PendingBatch]) -> Bool {
            guard let rewritten else { return now.count != count }
            return !rewritten.prefix(count).elementsEqual(now)
        }
    }

    /// The undo kept since ``keepPendingUndo()``; nil when none is kept.
    package private(set) var pendingUndo: PendingUndo?

    /// Starts keeping what the next inputs change in the pending batches (``pendingUndo``).
    package mutating func keepPendingUndo() { pendingUndo = PendingUndo(count: state.pending.count) }

    /// Called before any change of the pending batches but an append: the undo keeps them as
    /// they are (once per undo).
    mutating func willRewritePending() {
        earliestKnown = nil
        if pendingUndo != nil, pendingUndo!.rewritten == nil { pendingUndo!.rewritten = state.pending }
    }

    /// Gives an input the ids of orders and transfers it may meet (the agent keeps them in tables,
    /// not in the state): `order`, recorded with its payment seq; `transfer`, landed.
    package mutating func know(order: (id: ExactID, seq: UInt64)?, landedTransfer transfer: ExactID?) {
        if let order { state.recordedOrders = [order.id: order.seq] }
        if let transfer { state.landedTransfers = [transfer] }
    }

    /// Moves every pending batch's time and window by `seconds` (the wall clock was stepped by
    /// as much since they were made: a window lasts its seconds, whatever the clock is set to).
    package mutating func movePendingTimes(by seconds: Double) {
        guard !state.pending.isEmpty else { return }
        willRewritePending()
        for index in state.pending.indices {
            state.pending[index].at.addTimeInterval(seconds)
            state.pending[index].deadline?.addTimeInterval(seconds)
        }
    }

    /// Clears every pending batch's window: the host acknowledges, and its batches wait for the
    /// acknowledgement however long. Nothing is touched when none has one.
    private mutating func clearPendingWindows() {
        guard state.pending.contains(where: { $0.deadline != nil }) else { return }
        willRewritePending()
        for index in state.pending.indices { state.pending[index].deadline = nil }
    }

    /// Resumes from a state (a fresh one or one read back from storage).
    public init(state: SyncState, configuration: SyncConfiguration = .init(), isSynchronizerRegistered: Bool = false) {
        self.state = state
        self.configuration = configuration
        self.isSynchronizerRegistered = isSynchronizerRegistered
    }

    // MARK: - Views

    /// The WebView's basis: what the Mealz UI believes the cart holds — the Mealz-related lines of
    /// the last notification (Mealz's share before the first one), plus the pending deltas it
    /// does not count already (a notification opening a basket lists what is on its way), each
    /// batch clamped at 0 the way the host applies it. Only SKUs above 0. A `basketState` is
    /// diffed against it, so that the WebView repeating what it was told pushes nothing.
    public var mealzView: [ExactID: Int] {
        var view = state.viewBase ?? state.confirmed
        let counted = max(state.viewCountsThrough ?? 0, state.paidThrough ?? 0)
        for batch in state.pending where batch.seq > counted { RetailerProduct.apply(batch.products, to: &view) }
        return view
    }

    /// Mealz's share: the units that came from Mealz and that the host applied. Payments count it.
    public var mealzShare: [ExactID: Int] { state.confirmed }

    /// The signed sum of the pending deltas per SKU (only SKUs with a pending line; a sum may be 0).
    public var pendingDeltas: [ExactID: Int] {
        var sums: [ExactID: Int] = [:]
        for batch in state.pending {
            for line in batch.products { sums[ExactID(line.id), default: 0] = sums[ExactID(line.id), default: 0].saturatingAdd(line.quantity) }
        }
        return sums
    }

    /// The Mealz-related SKUs: those Mealz holds a quantity of, or has a pending delta for.
    public var mealzRelatedIds: Set<ExactID> {
        var ids = Set(state.confirmed.keys)
        for batch in state.pending { ids.formUnion(batch.products.lazy.map { ExactID($0.id) }) }
        return ids
    }

    /// The earliest pending-window deadline, if any: when ``expireWindows(at:)`` is due.
    public var nextDeadline: Date? { earliestKnown ?? state.pending.lazy.compactMap(\.deadline).min() }

    /// ``nextDeadline``, kept for the next asks (and the ``memo``) when it had to be looked for.
    package mutating func knowNextDeadline() -> Date? {
        if earliestKnown == nil { earliestKnown = .some(nextDeadline) }
        return nextDeadline
    }

    // MARK: - Mealz → host

    /// Takes one Mealz-side event; `source` is its id, carried into the records it causes.
    public mutating func receive(_ event: MealzEvent, source: String?, at now: Date) throws(SyncInputError) -> [SyncEffect] {
        switch event {
        case let .basketDelta(products):
            let deltas = try products.validatedDeltas()
            return step(at: now) { $0.push(deltas.nonZeroProducts, source: source, transferId: nil, at: now) }
        case let .basketState(products, basket):
            let target = try products.validatedAbsolute()
            if let basket, basket != state.basket {
                return step(at: now) { machine in
                    machine.state.counters.staleStates += 1
                    return [.staleState(basket: basket, current: machine.state.basket)]
                }
            }
            return step(at: now) { machine in
                let view = machine.mealzView
                var diff = ProductTally()
                for id in target.order { diff.add(id, target.quantities[id]! - (view[id] ?? 0)) }
                for id in view.keys.sorted() where target.quantities[id] == nil { diff.add(id, -view[id]!) }
                return machine.push(diff.nonZeroProducts, source: source, transferId: nil, at: now)
            }
        case let .basketTransfer(products, transferId):
            let deltas = try products.validatedDeltas()
            return step(at: now) { machine in
                if machine.state.landedTransfers.contains(ExactID(transferId)) {
                    machine.state.counters.duplicateTransfers += 1
                    return [.duplicateTransfer(transferId: transferId)]
                }
                let effects = machine.push(deltas.nonZeroProducts, source: source, transferId: transferId, at: now)
                if effects.contains(where: { if case .outbox = $0 { true } else { false } }) {
                    machine.state.landedTransfers.insert(ExactID(transferId))
                }
                return effects
            }
        case .redirectToCart:
            return step(at: now) { machine in
                let seq = machine.nextOutboxSeq()
                machine.state.counters.redirects += 1
                return [.outbox(machine.record(seq: seq, type: .redirectToCart, at: now, source: source))]
            }
        }
    }

    /// Rolls back every pending batch whose window is over at `now`.
    public mutating func expireWindows(at now: Date) -> [SyncEffect] {
        step(at: now) { _ in [] }
    }

    // MARK: - Host → Mealz

    /// `notifyRetailerBasketChanged`: the host's whole cart, absolute, and the highest outbox seq it
    /// has processed (`syncedThrough`), when it reports one.
    ///
    /// Settles what the host acknowledged (or, without `syncedThrough`, what its cart echoes), lets
    /// Mealz's share follow the cart downward, and notifies Mealz when the Mealz-related list or
    /// the acknowledgement changed.
    ///
    /// Only a cart written after a batch can echo it. `outboxSeqWhenWritten` is the last outbox
    /// seq when the cart was written, when the caller knows it (the agent does: a cart file that
    /// has not changed since a batch was made cannot show it applied); nil means now.
    /// `writtenAt`: when the cart was written, when the caller knows it (a file's change time) —
    /// a cart written inside a batch's window echoes it in time, however late it is taken (a pass
    /// run by cron, an agent stopped a while); the windows over by then are rolled back first.
    public mutating func retailerBasketChanged(
        _ products: [RetailerProduct], syncedThrough: UInt64?, outboxSeqWhenWritten: UInt64? = nil, writtenAt: Date? = nil, at now: Date
    ) throws(SyncInputError) -> [SyncEffect] {
        let cart = try products.validatedAbsolute()
        // Lines at 0 are not kept (most carts have none: the tally is taken as it is).
        let summed = cart.quantities.values.contains(0) ? cart.quantities.filter { $0.value > 0 } : cart.quantities
        return step(at: now, madeAt: writtenAt) { $0.takeCart(summed, ids: cart.order, syncedThrough: syncedThrough, echoableThrough: outboxSeqWhenWritten, at: now) }
    }

    /// Checks a host's lines as ``retailerBasketChanged(_:syncedThrough:outboxSeqWhenWritten:writtenAt:at:)``
    /// checks them before its step, and throws what it would: an empty id, a negative quantity,
    /// an id whose lines add up past a quantity's range. No state is read or changed.
    public static func checkAbsolute(_ products: [RetailerProduct]) throws(SyncInputError) {
        _ = try products.validatedAbsolute()
    }

    /// ``retailerBasketChanged(_:syncedThrough:outboxSeqWhenWritten:at:)`` for lines whose sums
    /// are known already: an agent reading a large cart by its changed lines keeps the sums from
    /// one version to the next instead of adding up every line again. `summed` must be what the
    /// lines add up to per id, the ids at 0 left out, and the lines valid (ids not empty,
    /// quantities not negative) — as a cart reader that refuses anything else gives them.
    package mutating func retailerBasketChanged(
        lines: [RetailerProduct], summed: [ExactID: Int], syncedThrough: UInt64?, outboxSeqWhenWritten: UInt64?, writtenAt: Date? = nil, at now: Date
    ) -> [SyncEffect] {
        step(at: now, madeAt: writtenAt) { $0.takeCart(summed, ids: lines.lazy.map { ExactID($0.id) }, syncedThrough: syncedThrough, echoableThrough: outboxSeqWhenWritten, at: now) }
    }

    /// The reference host (`basket-sync apply`) applied the outbox through `seq` and wrote it in
    /// the cart: an acknowledgement verified by the one who applied, so it counts even when the
    /// number equals a claim once made beyond the outbox. The cart itself follows as usual.
    public mutating func hostApplied(through seq: UInt64, at now: Date) -> [SyncEffect] {
        step(at: now) { machine in
            let acknowledged = min(seq, machine.state.lastOutboxSeq)
            machine.state.hostClaim = seq
            machine.state.hostSyncedThrough = max(machine.state.hostSyncedThrough ?? 0, acknowledged)
            let effects = machine.settlePending(machine.state.pending.prefix { $0.seq <= acknowledged }.count)
            machine.clearPendingWindows()
            return effects + machine.lateAcknowledgements(through: acknowledged)
        }
    }

    // MARK: - Payments and store

    /// `paymentStarted`: best-effort. Whatever is missing (mode, store, a Mealz product, valid
    /// products) gives a `skipped` record with a reason, never an error. A nil `productList`
    /// says the host could not tell what was bought (its list could not be read). An order that
    /// `handlePayment` recorded already is paid: nothing is recorded, and the answer is
    /// ``SyncEffect/paymentAlreadyRecorded(orderId:seq:)``.
    public mutating func paymentStarted(
        totalPrice: Money, productList: [RetailerProduct]?, orderId: String?, at now: Date
    ) -> [SyncEffect] {
        if let orderId, let seq = state.recordedOrders[ExactID(orderId)] {
            return step(at: now) { machine in
                machine.state.counters.duplicatePayments += 1
                return [.paymentAlreadyRecorded(orderId: orderId, seq: seq)]
            }
        }
        return step(at: now) { machine in
            let reason: PaymentRecord.SkipReason?
            var mealzProducts: [RetailerProduct] = []
            if machine.state.mode != .retailer {
                reason = .notRetailerMode
            } else if machine.state.storeId == nil {
                reason = .noStore
            } else if let tally = try? productList?.validatedAbsolute() {
                mealzProducts = machine.mealzPart(of: tally)
                reason = mealzProducts.isEmpty ? .noMealzProduct : nil
            } else {
                reason = .invalidProducts
            }
            return [.payment(machine.recordPayment(
                type: .paymentStarted, reason: reason, orderId: orderId, totalPrice: totalPrice,
                products: productList ?? [], mealzProducts: mealzProducts, at: now))]
        }
    }

    /// `handlePayment`: records the payment once per order id (as `skipped` when no Mealz product
    /// was bought); a recorded one closes the Mealz basket. An order recorded before is answered
    /// first, whatever the mode or store now. Otherwise throws, recording nothing, without retailer
    /// mode or a store. The caller runs its completion only when this returns.
    public mutating func handlePayment(
        totalPrice: Money, productList: [RetailerProduct], orderId: String, at now: Date
    ) throws(PaymentError) -> [SyncEffect] {
        guard !orderId.isEmpty else { throw .emptyOrderId }
        // A retry is answered before any other check: the order was recorded, whatever changed since.
        if let seq = state.recordedOrders[ExactID(orderId)] {
            return step(at: now) { machine in
                machine.state.counters.duplicatePayments += 1
                return [.paymentAlreadyRecorded(orderId: orderId, seq: seq)]
            }
        }
        guard state.mode == .retailer else { throw .notRetailerMode }
        guard state.storeId != nil else { throw .noStore }
        let tally: ProductTally
        do { tally = try productList.validatedAbsolute() } catch { throw .invalidProducts(error) }
        return step(at: now) { machine in
            let mealzProducts = machine.mealzPart(of: tally)
            let record = machine.recordPayment(
                type: .handlePayment, reason: mealzProducts.isEmpty ? .noMealzProduct : nil,
                orderId: orderId, totalPrice: totalPrice, products: productList,
                mealzProducts: mealzProducts, at: now)
            machine.state.recordedOrders[ExactID(orderId)] = record.seq
            // Only a recorded payment closes the basket: a skipped one bought nothing of Mealz's.
            guard record.status == .recorded else { return [.payment(record)] }
            return [.payment(record), machine.closeBasket(), machine.notifyBasketOpened(at: now)]
        }
    }

    /// `setSelectedStoreWithExternalId`, and the mode when given. A different store starts a new
    /// Mealz basket that carries over what is already in the host cart: nothing already pushed is
    /// pushed again, and no quantity is doubled.
    public mutating func setSelectedStore(externalId: String?, mode: SyncMode?, at now: Date) -> [SyncEffect] {
        step(at: now) { machine in
            let newMode = mode ?? machine.state.mode
            guard !externalId.isByteEqual(to: machine.state.storeId) || newMode != machine.state.mode else { return [] }
            let opensBasket: Bool
            if let previous = machine.state.storeId, !externalId.isByteEqual(to: previous) { opensBasket = true } else { opensBasket = false }
            if opensBasket { machine.state.basket += 1 }
            machine.state.storeId = externalId
            machine.state.mode = newMode
            let changed = SyncEffect.storeChanged(storeId: externalId, mode: newMode, basket: machine.state.basket)
            return opensBasket ? [changed, machine.notifyBasketOpened(at: now)] : [changed]
        }
    }

    // MARK: - Internals

    /// Runs one input: expires the windows over at `now` (over when the input was made, for an
    /// input made before it is taken: `madeAt`), applies `body`, then says whether the timer must
    /// be armed again or disarmed.
    private mutating func step(at now: Date, madeAt: Date? = nil, _ body: (inout SyncStateMachine) -> [SyncEffect]) -> [SyncEffect] {
        let deadlineBefore = knowNextDeadline()
        var effects = rollBackExpired(at: madeAt.map { min($0, now) } ?? now)
        effects += body(&self)
        let deadlineAfter = knowNextDeadline()
        if deadlineAfter != deadlineBefore {
            effects.append(deadlineAfter.map { .armTimer(at: $0) } ?? .disarmTimer)
        }
        return effects
    }

    private mutating func rollBackExpired(at now: Date) -> [SyncEffect] {
        var effects: [SyncEffect] = []
        // Looked at before it is touched: a removal would copy every pending batch, and most
        // inputs expire none (the earliest window, kept, says so without a walk).
        if let earliest = knowNextDeadline(), earliest <= now {
            willRewritePending()
            state.pending.removeAll { batch in
                guard let deadline = batch.deadline, deadline <= now else { return false }
                effects.append(.rolledBack(batch))
                return true
            }
        }
        for case let .rolledBack(batch) in effects {
            state.rolledBack.append(batch)
            state.counters.rolledBack += 1
        }
        // A batch below one a cart showed, rolled back: the host went past it.
        if !effects.isEmpty { advanceEchoedThrough() }
        let overflow = state.rolledBack.count - configuration.rolledBackMemory
        if overflow > 0 { state.rolledBack.removeFirst(overflow) }
        // Bounded by lines too: the oldest go first, the newest stays.
        var lines = state.rolledBack.reduce(0) { $0 + $1.products.count }
        while lines > configuration.rolledBackLines, state.rolledBack.count > 1 {
            lines -= state.rolledBack.removeFirst().products.count
        }
        return effects
    }

    private mutating func nextOutboxSeq() -> UInt64 {
        state.lastOutboxSeq += 1
        return state.lastOutboxSeq
    }

    private func record(
        seq: UInt64, type: OutboxRecord.RecordType, at now: Date, source: String?,
        products: [RetailerProduct] = [], transferId: String? = nil
    ) -> OutboxRecord {
        OutboxRecord(
            seq: seq, id: "\(state.syncId)-\(seq)", type: type, at: now, source: source,
            products: products, transferId: transferId)
    }

    /// The host cart as last taken with every pending batch applied, in seq order, as the host
    /// applies them: from ``projected`` and the batches appended since, or made again whole when
    /// the host cart or the pending batches changed otherwise.
    private mutating func projectedHostCart() -> [ExactID: Int] {
        let pending = state.pending
        // Nothing pending: the host cart itself, and nothing kept (a large cart is not held twice).
        guard !pending.isEmpty else {
            projected = nil
            return state.hostCart ?? [:]
        }
        var made: ProjectedCart
        if let kept = projected, kept.base == state.hostCart, pending.count >= kept.count,
           kept.count == 0 || (pending[0].seq == kept.firstSeq && pending[kept.count - 1].seq == kept.lastSeq) {
            made = kept
            projected = nil  // uniquely referenced while it grows
        } else {
            made = ProjectedCart(base: state.hostCart, count: 0, firstSeq: 0, lastSeq: 0, cart: state.hostCart ?? [:])
        }
        for batch in pending[made.count...] { RetailerProduct.apply(batch.products, to: &made.cart) }
        if let first = pending.first, let last = pending.last { (made.count, made.firstSeq, made.lastSeq) = (pending.count, first.seq, last.seq) }
        projected = made
        return made.cart
    }

    /// One `updateBasket` batch for the host, pending until settled; nothing when empty.
    private mutating func push(_ asked: [RetailerProduct], source: String?, transferId: String?, at now: Date) -> [SyncEffect] {
        guard !asked.isEmpty else { return [] }
        guard isSynchronizerRegistered else {
            state.counters.ignored += 1
            return [.ignored(IgnoredBatch(source: source, products: asked))]
        }
        let (deltas, clamped) = withinLimit(asked)
        guard !deltas.isEmpty else { return clamped }
        let seq = nextOutboxSeq()
        // A host that acknowledges is waited for however long; the others get the SDK's window.
        let deadline = state.hostSyncedThrough == nil ? now.addingTimeInterval(configuration.pendingTimeout.seconds) : nil
        state.pending.append(PendingBatch(seq: seq, products: deltas, at: now, deadline: deadline))
        if let known = earliestKnown, let deadline { earliestKnown = .some(known.map { min($0, deadline) } ?? deadline) }
        state.counters.updateBaskets += 1
        return clamped + [.outbox(record(seq: seq, type: .updateBasket, at: now, source: source, products: deltas, transferId: transferId))]
    }

    /// `deltas` with each increase cut so that its line of the host cart — as last taken, with
    /// the pending batches applied (on their way to it) — lands at `maxQuantity` at most: a
    /// record the host cannot apply whole would make a cart basket-sync rejects. An increase cut
    /// to nothing is left out. Decreases are kept as they are (the host clamps them at 0).
    private mutating func withinLimit(_ deltas: [RetailerProduct]) -> (kept: [RetailerProduct], clamped: [SyncEffect]) {
        let limit = configuration.maxQuantity
        guard deltas.contains(where: { $0.quantity > 0 }) else { return (deltas, []) }
        var known = projectedHostCart()
        var kept: [RetailerProduct] = []
        var clamped: [SyncEffect] = []
        for delta in deltas {
            let id = ExactID(delta.id)
            let before = known[id] ?? 0
            var recorded = delta.quantity
            if recorded > 0, before.saturatingAdd(recorded) > limit {
                recorded = max(0, limit - before)
                clamped.append(.clampedAtLimit(id: delta.id, asked: delta.quantity, recorded: recorded, limit: limit))
            }
            known[id] = RetailerProduct.applying(delta: recorded, to: before)
            if recorded != 0 { kept.append(RetailerProduct(id: delta.id, quantity: recorded)) }
        }
        return (kept, clamped)
    }

    /// Takes the host cart `newCart` (quantities by id, none at 0), whose lines have the ids
    /// `ids` in file order (an id may come again).
    private mutating func takeCart(
        _ newCart: [ExactID: Int], ids: some Sequence<ExactID>, syncedThrough: UInt64?, echoableThrough: UInt64?, at now: Date
    ) -> [SyncEffect] {
        var effects: [SyncEffect] = []
        // A cart written before a batch existed cannot echo it (a legacy host's cart may already
        // hold what the batch adds).
        let echoable = echoableThrough ?? state.lastOutboxSeq
        // The host applies in seq order: once a cart showed batch N applied, every batch below N
        // was behind it, applied or skipped — none of them can come late any more.
        let passed = state.echoedAhead ?? 0
        let previousCart = state.hostCart ?? [:]
        state.hostCart = newCart

        let settleCount: Int
        var echoed: Set<UInt64> = []
        // The last batch of the run the cart shows (all of it applied: the host applies in seq
        // order), when it was judged as a run.
        var runEnd: UInt64?
        if let syncedThrough {
            let acknowledged = acknowledge(syncedThrough, writtenThrough: echoable, into: &effects)
            settleCount = state.pending.prefix { $0.seq <= acknowledged }.count
            // From now on this host acknowledges: its batches wait for the acknowledgement.
            clearPendingWindows()
            effects += lateAcknowledgements(through: acknowledged)
            let refused = syncedThrough > min(state.lastOutboxSeq, echoable)
            state.cartShowsThrough = refused ? shownRun(from: previousCart, in: newCart, through: echoable) : nil
        } else if state.hostSyncedThrough != nil {
            // A host that has ever acknowledged never echoes: its cart without the field says
            // nothing of what it applied (it settles nothing), but it may hold batches applied.
            settleCount = 0
            effects.append(.acknowledgementMissing)
            state.cartShowsThrough = shownRun(from: previousCart, in: newCart, through: echoable)
        } else {
            settleCount = 0
            if let run = appliedRun(previousCart: previousCart, newCart: newCart, after: passed, through: echoable) {
                // The shortest run of rolled-back and pending batches, in seq order from the
                // first, that explains the cart on every line they touch (none when the cart holds
                // what it held on all of them): those, the rolled-back ones late.
                effects += confirmLate(state.rolledBack.filter { run.late.contains($0.seq) })
                echoed = run.pending
                runEnd = run.pending.max()
            } else {
                // The host applies in seq order: the rolled-back batches (below the pending ones)
                // come first — a cart showing one unit of two equal batches shows the first — and
                // the pending ones are judged on the cart after those it shows.
                let late = lateEchoes(previousCart: previousCart, newCart: newCart, after: passed, through: echoable)
                effects += late.effects
                var afterLate = previousCart
                for batch in late.batches { RetailerProduct.apply(batch.products, to: &afterLate) }
                echoed = echoedBatches(previousCart: afterLate, newCart: newCart, through: echoable)
            }
        }
        effects += settlePending(settleCount)
        if !echoed.isEmpty {
            // A run the cart shows is applied whole, its last batch included. Judged line by line,
            // a batch the cart shows only by holding what it held on every line (a removal on a
            // line at 0) says nothing of how far the host got: the batches below it may still come.
            let telling = runEnd.map { [$0] } ?? state.pending.filter { batch in
                echoed.contains(batch.seq) && batch.products.contains { (newCart[ExactID($0.id)] ?? 0) != (previousCart[ExactID($0.id)] ?? 0) }
            }.map(\.seq)
            effects += settleEchoed(echoed)
            if let highest = telling.max() { state.echoedAhead = max(state.echoedAhead ?? 0, highest) }
            advanceEchoedThrough()
        }


        // Mealz follows the cart downward only: units the shopper adds are not Mealz's. Where
        // removals are still unsettled on the line, the cart may show them already: the share
        // lowered for them is remembered, so that they are not taken again when they settle.
        var unsettledRemovals: [ExactID: Int]?
        for (id, quantity) in state.confirmed {
            let inCart = newCart[id] ?? 0
            guard inCart < quantity else { continue }
            state.confirmed[id] = inCart == 0 ? nil : inCart
            if unsettledRemovals == nil {
                var removals: [ExactID: Int] = [:]
                for batch in state.pending + state.rolledBack {
                    for line in batch.products where line.quantity < 0 { removals[ExactID(line.id), default: 0] -= line.quantity }
                }
                unsettledRemovals = removals
            }
            let room = (unsettledRemovals?[id] ?? 0) - (state.shareFollowedAhead[id] ?? 0)
            if room > 0 { state.shareFollowedAhead[id, default: 0] += min(quantity - inCart, room) }
        }

        // The Mealz lines in the order they first appear in the cart. Few (the usual case), they
        // are found along the cart by comparing bytes — cheaper than hashing every line of a
        // large cart — and the walk ends once each is found.
        let related = mealzRelatedIds
        var list: [RetailerProduct] = []
        if related.count <= 16 {
            var left = Array(related).filter { newCart[$0] != nil }
            for id in ids {
                if left.isEmpty { break }
                guard let index = left.firstIndex(of: id) else { continue }
                left.remove(at: index)
                list.append(RetailerProduct(id: id.string, quantity: newCart[id]!))
            }
        } else {
            var listed: Set<ExactID> = []
            for id in ids where related.contains(id) && listed.insert(id).inserted {
                if let quantity = newCart[id] { list.append(RetailerProduct(id: id.string, quantity: quantity)) }
            }
        }
        let listMap = Dictionary(uniqueKeysWithValues: list.map { (ExactID($0.id), $0.quantity) })
        if state.lastNotified != listMap || state.lastNotifiedSyncedThrough != state.hostSyncedThrough {
            state.lastNotificationSeq += 1
            state.lastNotified = listMap
            state.viewBase = listMap
            // The pending batches this cart shows applied are in its lines already.
            state.viewCountsThrough = state.cartShowsThrough.flatMap { shows in state.pending.first.map { $0.seq <= shows } == true ? shows : nil }
            state.lastNotifiedSyncedThrough = state.hostSyncedThrough
            state.counters.notifications += 1
            effects.append(.notify(BasketNotification(
                seq: state.lastNotificationSeq, at: now, products: list, syncedThrough: state.hostSyncedThrough,
                basket: state.basket)))
        }
        return effects
    }

    /// For an acknowledging host's cart that acknowledges nothing new (its claim refused, or
    /// none): the last pending batch it shows applied, so that the WebView's basis does not count
    /// those batches twice (docs/spec.md §4 rule 4). The host applies in seq order: from the last
    /// cart (and the batches it showed), the shortest run of the next pending batches after which
    /// every line they touch is at the quantity the cart holds — none when the cart holds what
    /// the last one did. Nothing settles by it. Keeps what the last cart showed when the cart
    /// matches no run (the shopper edited those lines).
    private func shownRun(from previousCart: [ExactID: Int], in newCart: [ExactID: Int], through echoable: UInt64) -> UInt64? {
        let before = state.cartShowsThrough ?? 0
        let batches = state.pending.filter { $0.seq > before && $0.seq <= echoable }
        var lines = RunLines(batches, from: previousCart, to: newCart)
        // The cart as it was: no batch shown since.
        if lines.differing == 0 { return state.cartShowsThrough }
        var shown: UInt64?
        for batch in batches {
            lines.apply(batch)
            // The shortest run that explains the cart: a longer one that also does adds up to
            // nothing on every line it touches, and is not evidence that the host applied it.
            if lines.differing == 0, shown == nil { shown = batch.seq }
        }
        return shown ?? state.cartShowsThrough
    }

    /// Every line a run of batches touches, from the quantity a cart held, as the host applies
    /// the batches in seq order (a removal stops at 0), and how many of them differ from what a
    /// new cart holds: 0 once the run so far explains the new cart.
    private struct RunLines {
        private var running: [ExactID: Int] = [:]
        private let target: [ExactID: Int]
        private(set) var differing = 0

        init(_ batches: [PendingBatch], from previousCart: [ExactID: Int], to newCart: [ExactID: Int]) {
            target = newCart
            for batch in batches { for line in batch.products { running[ExactID(line.id)] = previousCart[ExactID(line.id)] ?? 0 } }
            differing = running.reduce(0) { $0 + ((newCart[$1.key] ?? 0) == $1.value ? 0 : 1) }
        }

        /// The next batch of the run applied.
        mutating func apply(_ batch: PendingBatch) {
            for line in batch.products {
                let id = ExactID(line.id)
                let before = running[id]!
                let after = RetailerProduct.applying(delta: line.quantity, to: before)
                running[id] = after
                let wanted = target[id] ?? 0
                if before == wanted, after != wanted { differing += 1 } else if before != wanted, after == wanted { differing -= 1 }
            }
        }
    }

    /// Settles the first `count` pending batches: the host applied them.
    private mutating func settlePending(_ count: Int) -> [SyncEffect] {
        var effects: [SyncEffect] = []
        for batch in state.pending.prefix(count) {
            settle(batch)
            effects.append(.settled(seq: batch.seq))
            state.counters.settled += 1
        }
        if count > 0 {
            willRewritePending()
            state.pending.removeFirst(count)
        }
        return effects
    }

    /// A batch the host applied becomes Mealz's share: its additions raise the share and its
    /// removals take Mealz's units first, never below 0 (the shopper's own units on the line stay
    /// the shopper's). A removal the share already followed the cart down for (a cart showed it
    /// before it settled) is not taken twice. The share then follows the cart downward.
    mutating func settle(_ batch: PendingBatch) {
        if let paid = state.paidThrough, batch.seq <= paid {
            if state.pending.first.map({ $0.seq > paid }) ?? true { state.paidThrough = nil }
            return
        }
        for line in batch.products {
            let id = ExactID(line.id)
            var delta = line.quantity
            if delta < 0, let ahead = state.shareFollowedAhead[id] {
                let credit = min(-delta, ahead)
                delta += credit
                state.shareFollowedAhead[id] = ahead == credit ? nil : ahead - credit
            }
            RetailerProduct.apply([RetailerProduct(id: line.id, quantity: delta)], to: &state.confirmed)
        }
    }

    /// Whether a cart's `syncedThrough` acknowledges nothing, whether or not it is reported
    /// again: it claims a record beyond the outbox, or beyond what existed when the cart was
    /// written (`writtenThrough`). The one rule ``retailerBasketChanged(_:syncedThrough:outboxSeqWhenWritten:writtenAt:at:)``
    /// follows, for a caller that keeps what the refused version was.
    public func refuses(claim: UInt64, writtenThrough: UInt64) -> Bool {
        claim > state.lastOutboxSeq || claim > writtenThrough
    }

    /// Checks a `syncedThrough` and returns the outbox seq the host has acknowledged so far. By
    /// causality, not by value: a cart version acknowledges only records that existed when it was
    /// written (`writtenThrough`, the last seq committed before it appeared). A claim beyond the
    /// outbox, or beyond what existed when the cart was written, acknowledges **nothing**: no
    /// honest host claims a record it could not have seen, so its counter says nothing true (a
    /// cart from another or a reset directory, a counter run ahead). An honest claim is never
    /// refused for its value, whatever an earlier claim said. A claim below the
    /// highest acknowledged un-settles nothing. Each claim out of line is reported once (the
    /// same claim in the host's next cart versions is not reported again).
    private mutating func acknowledge(_ claim: UInt64, writtenThrough: UInt64, into effects: inout [SyncEffect]) -> UInt64 {
        let highest = state.hostSyncedThrough ?? 0
        let isNew = claim != state.hostClaim
        state.hostClaim = claim
        state.acknowledgementCap = nil
        var acknowledged = claim
        if claim > state.lastOutboxSeq {
            acknowledged = 0
            if isNew {
                effects.append(.acknowledgementBeyondOutbox(syncedThrough: claim, lastSeq: state.lastOutboxSeq))
                state.counters.acknowledgementsBeyondOutbox += 1
            }
        } else if refuses(claim: claim, writtenThrough: writtenThrough) {
            acknowledged = 0
            if isNew {
                effects.append(.acknowledgementBeforeRecords(syncedThrough: claim, writtenThrough: writtenThrough))
                state.counters.acknowledgementsBeyondOutbox += 1
            }
        }
        if claim < highest, isNew {
            effects.append(.acknowledgementWentBack(syncedThrough: claim, highest: highest))
            state.counters.acknowledgementsWentBack += 1
        }
        state.hostSyncedThrough = max(highest, acknowledged)
        return state.hostSyncedThrough!
    }

    /// Rolled-back batches an acknowledgement covers: the host applied them after all (its first
    /// `syncedThrough` came after their window). They become Mealz's share, reported as late —
    /// but for those below a batch a cart showed: the host went past them without applying them
    /// (rule 5), and `apply` starts after them.
    private mutating func lateAcknowledgements(through acknowledged: UInt64) -> [SyncEffect] {
        var effects: [SyncEffect] = []
        let passed = state.echoedAhead ?? 0
        let covered = state.rolledBack.filter { $0.seq <= acknowledged && $0.seq > passed }
        state.rolledBack.removeAll { $0.seq <= acknowledged }  // those passed are closed too
        for batch in covered {
            settle(batch)
            effects.append(.lateAcknowledgement(seq: batch.seq))
        }
        state.counters.lateAcknowledgements += UInt64(effects.count)
        return effects
    }

    /// For a host without `syncedThrough`, when no run of batches explains the cart (the shopper
    /// changed one of their lines: ``appliedRun(previousCart:newCart:after:through:)`` is nil):
    /// the pending batches the new cart shows applied, judged line by line. Per
    /// SKU, the pending batches touching it are applied in seq order to the previous cart
    /// (clamped at 0 as the host applies them); the most of them whose running value is what the
    /// new cart holds are the ones it shows (a diligent host applies them all, and the cart shows
    /// the last). A batch is echoed when the cart shows it for every
    /// line it changed: a later batch shown does not settle an earlier one the cart does not
    /// show (the host skipped it, or applied out of order).
    private func echoedBatches(previousCart: [ExactID: Int], newCart: [ExactID: Int], through echoable: UInt64) -> Set<UInt64> {
        let walk = Self.walkLines(state.pending.filter { $0.seq <= echoable }, from: previousCart, to: newCart)
        return Self.shownInSeqOrder(walk.positions, counts: walk.counts, fewest: false)
    }

    /// Batches (in seq order) applied line by line to a cart as the host applies them (a removal
    /// stops at 0): each batch with, per line, its place among the batches on that line (from
    /// 1); per line, the counts of its batches after which it is what the new cart holds (0: it
    /// held that before them), and its running value after each.
    private static func walkLines(
        _ batches: [PendingBatch], from previousCart: [ExactID: Int], to newCart: [ExactID: Int]
    ) -> (positions: [(seq: UInt64, lines: [(id: ExactID, position: Int)])], counts: [ExactID: [Int]], values: [ExactID: [Int]]) {
        var counts: [ExactID: [Int]] = [:]
        var values: [ExactID: [Int]] = [:]
        var positions: [(seq: UInt64, lines: [(id: ExactID, position: Int)])] = []
        for batch in batches {
            var lines: [(id: ExactID, position: Int)] = []
            for line in batch.products {
                let id = ExactID(line.id)
                let before = values[id]?.last ?? previousCart[id] ?? 0
                if values[id] == nil, (newCart[id] ?? 0) == before { counts[id, default: []].append(0) }
                let after = RetailerProduct.applying(delta: line.quantity, to: before)
                values[id, default: []].append(after)
                if (newCart[id] ?? 0) == after { counts[id, default: []].append(values[id]!.count) }
                lines.append((id, values[id]!.count))
            }
            positions.append((batch.seq, lines))
        }
        return (positions, counts, values)
    }

    /// Batches judged line by line, as a host applying in seq order leaves them. `positions`:
    /// each batch (in seq order) with, per line, its place among the batches on that line (from
    /// 1); `counts`: per line, the numbers of its batches after which it is what the cart holds,
    /// the one chosen the most (`fewest`: the fewest). A batch is shown when each of its lines'
    /// chosen count reaches it. A line's running value counts every earlier batch on it as
    /// applied, so a count reaching a batch not shown is none: the line's count is chosen again
    /// below that batch, until nothing moves (a later batch never shows without the earlier ones
    /// on its lines, nor an earlier one by a count that took a later one not shown).
    private static func shownInSeqOrder(
        _ positions: [(seq: UInt64, lines: [(id: ExactID, position: Int)])], counts: [ExactID: [Int]], fewest: Bool
    ) -> Set<UInt64> {
        var limit: [ExactID: Int] = [:]
        while true {
            var chosen: [ExactID: Int] = [:]
            for (id, list) in counts {
                let allowed = list.filter { $0 <= limit[id] ?? .max }
                if let count = fewest ? allowed.min() : allowed.max() { chosen[id] = count }
            }
            var shown: Set<UInt64> = []
            var moved = false
            for batch in positions {
                if batch.lines.allSatisfy({ $0.position <= chosen[$0.id] ?? 0 }) {
                    shown.insert(batch.seq)
                    continue
                }
                for line in batch.lines where line.position - 1 < limit[line.id] ?? .max {
                    limit[line.id] = line.position - 1
                    moved = true
                }
            }
            if !moved { return shown }
        }
    }

    /// `apply` starts after `echoedThrough`: the highest seq a cart showed (`echoedAhead`), but
    /// never at or past a batch still pending below it (the host has not applied that one).
    private mutating func advanceEchoedThrough() {
        guard let ahead = state.echoedAhead else { return }
        let firstLeft = state.pending.first?.seq
        state.echoedThrough = max(state.echoedThrough ?? 0, firstLeft.map { min(ahead, $0 - 1) } ?? ahead)
    }

    /// Settles the pending batches a cart echoed (not always the first ones).
    private mutating func settleEchoed(_ seqs: Set<UInt64>) -> [SyncEffect] {
        var effects: [SyncEffect] = []
        for batch in state.pending where seqs.contains(batch.seq) {
            settle(batch)
            effects.append(.settled(seq: batch.seq))
            state.counters.settled += 1
        }
        if !seqs.isEmpty {
            willRewritePending()
            state.pending.removeAll { seqs.contains($0.seq) }
        }
        return effects
    }

    /// Rolled-back batches that the new cart shows applied: the host was late, the units are
    /// Mealz's after all (reported).
    ///
    /// The host applies in seq order, so a batch below one a cart showed before (`passed`) is
    /// behind the host and never comes late. For each SKU, the later rolled-back batches that touch it are
    /// applied one after the other to the cart as it was; the fewest of them whose running value
    /// is what the new cart holds are the ones it shows (none when it holds what it held before
    /// them). A batch is echoed when the cart shows it for every line: two equal batches are not
    /// both echoed by a cart that shows one, and two that a cart shows together are.
    private mutating func lateEchoes(
        previousCart: [ExactID: Int], newCart: [ExactID: Int], after passed: UInt64, through echoable: UInt64
    ) -> (effects: [SyncEffect], batches: [PendingBatch]) {
        let judged = state.rolledBack.filter { $0.seq > passed && $0.seq <= echoable }.sorted { $0.seq < $1.seq }
        var (positions, counts, values) = Self.walkLines(judged, from: previousCart, to: newCart)
        // A line no count of them alone brings to what the new cart holds may show some of them
        // applied late with pending batches after them (the host applies in seq order, the late
        // ones first): unless the pending ones alone bring it there, the counts of rolled-back
        // ones after which the pending ones do.
        if counts.count < values.count {
            var pendingDeltas: [ExactID: [Int]] = [:]
            for batch in state.pending where batch.seq <= echoable {
                for line in batch.products where values[ExactID(line.id)] != nil && counts[ExactID(line.id)] == nil {
                    pendingDeltas[ExactID(line.id), default: []].append(line.quantity)
                }
            }
            for (id, deltas) in pendingDeltas {
                let target = newCart[id] ?? 0
                func reaches(from start: Int) -> Bool {
                    var value = start
                    for delta in deltas {
                        value = RetailerProduct.applying(delta: delta, to: value)
                        if value == target { return true }
                    }
                    return false
                }
                if reaches(from: previousCart[id] ?? 0) { continue }
                let reaching = values[id]!.indices.filter { reaches(from: values[id]![$0]) }.map { $0 + 1 }
                if !reaching.isEmpty { counts[id] = reaching }
            }
        }
        let shown = Self.shownInSeqOrder(positions, counts: counts, fewest: true)
        let echoed = judged.filter { shown.contains($0.seq) }
        return (confirmLate(echoed), echoed)
    }

    /// Confirms rolled-back batches a cart showed applied: settled after all (late echoes).
    private mutating func confirmLate(_ batches: [PendingBatch]) -> [SyncEffect] {
        let seqs = Set(batches.map(\.seq))
        state.rolledBack.removeAll { seqs.contains($0.seq) }
        var effects: [SyncEffect] = []
        for batch in batches {
            settle(batch)
            state.echoedThrough = max(state.echoedThrough ?? 0, batch.seq)
            state.echoedAhead = max(state.echoedAhead ?? 0, batch.seq)
            effects.append(.lateEcho(seq: batch.seq))
        }
        state.counters.lateEchoes += UInt64(effects.count)
        return effects
    }

    /// For a host without `syncedThrough`, which applies in seq order: what a cart shows is the
    /// shortest run of the batches it could show — rolled back (after those behind what a cart
    /// showed) and pending, in seq order from the first — after which every line any of them
    /// touches is what the new cart holds. A longer run that also explains the cart adds up to
    /// nothing on every line it touches (+3 then −3, a removal on a line at 0): that is no
    /// evidence the host applied it, and taking it as applied would put the host ahead of where
    /// it is — its next carts misjudged, the batches below it never confirmed late. Left as they
    /// are, such batches settle with the next cart that shows a change after them, or roll back
    /// (their units add up to nothing in the cart either way; in Mealz's share too, unless a
    /// removal among them took units that were not Mealz's). Empty when the cart holds what it held on every
    /// such line (nothing shown); nil when no run explains the cart (the shopper changed one of
    /// those lines): each line is judged alone then (``lateEchoes``,
    /// ``echoedBatches(previousCart:newCart:through:)``).
    private func appliedRun(
        previousCart: [ExactID: Int], newCart: [ExactID: Int], after passed: UInt64, through echoable: UInt64
    ) -> (late: Set<UInt64>, pending: Set<UInt64>)? {
        let rolled = state.rolledBack.filter { $0.seq > passed && $0.seq <= echoable }
        let lateSeqs = Set(rolled.map(\.seq))
        let run = (rolled + state.pending.filter { $0.seq <= echoable }).sorted { $0.seq < $1.seq }
        var lines = RunLines(run, from: previousCart, to: newCart)
        guard lines.differing > 0 else { return ([], []) }
        for (index, batch) in run.enumerated() {
            lines.apply(batch)
            if lines.differing == 0 {
                let shown = Set(run.prefix(index + 1).map(\.seq))
                return (shown.intersection(lateSeqs), shown.subtracting(lateSeqs))
            }
        }
        return nil
    }

    /// The Mealz part of a list of bought products: each line at most at Mealz's share.
    private func mealzPart(of bought: ProductTally) -> [RetailerProduct] {
        let view = paymentShare
        return bought.order.compactMap { id in
            let quantity = min(bought.quantities[id]!, view[id] ?? 0)
            return quantity > 0 ? RetailerProduct(id: id.string, quantity: quantity) : nil
        }
    }

    /// Mealz's share as a payment counts it (docs/spec.md §4 rule 7): with the pending batches
    /// the last cart showed applied (an acknowledging host whose claim was refused, or none)
    /// settled, since the payment pays them with that cart — never above what the cart holds.
    private var paymentShare: [ExactID: Int] {
        guard let shows = state.cartShowsThrough, let first = state.pending.first, first.seq <= shows else { return state.confirmed }
        var trial = self
        for batch in state.pending where batch.seq <= shows { trial.settle(batch) }
        var share = trial.state.confirmed
        for (id, quantity) in share {
            let inCart = state.hostCart?[id] ?? 0
            if inCart < quantity { share[id] = inCart == 0 ? nil : inCart }
        }
        return share
    }

    private mutating func recordPayment(
        type: PaymentRecord.PaymentType, reason: PaymentRecord.SkipReason?, orderId: String?,
        totalPrice: Money, products: [RetailerProduct], mealzProducts: [RetailerProduct], at now: Date
    ) -> PaymentRecord {
        state.lastPaymentSeq += 1
        if reason == nil { state.counters.paymentsRecorded += 1 } else { state.counters.paymentsSkipped += 1 }
        return PaymentRecord(
            seq: state.lastPaymentSeq, type: type, at: now, status: reason == nil ? .recorded : .skipped,
            reason: reason, storeId: state.storeId, orderId: orderId, totalPrice: totalPrice,
            products: products, mealzProducts: mealzProducts, basket: state.basket)
    }

    /// A new basket is told at once (docs/spec.md §4 rule 7): a notification of the new basket's
    /// number whose lines are the WebView's basis now — what is on its way to the cart (the
    /// pending batches carried into it after a payment; the basis kept across a store change).
    /// From then on the basis is what it says: its lines become the base and the batches still
    /// pending are counted in it already.
    mutating func notifyBasketOpened(at now: Date) -> SyncEffect {
        let basis = mealzView
        let ids = basis.keys.sorted()
        state.lastNotificationSeq += 1
        state.counters.notifications += 1
        state.lastNotified = basis
        state.viewBase = basis
        state.viewCountsThrough = state.lastOutboxSeq
        state.lastNotifiedSyncedThrough = state.hostSyncedThrough
        return .notify(BasketNotification(
            seq: state.lastNotificationSeq, at: now, products: ids.map { RetailerProduct(id: $0.string, quantity: basis[$0]!) },
            syncedThrough: state.hostSyncedThrough, basket: state.basket))
    }

    /// After a recorded payment: Mealz's share is empty and the next cart starts a new basket.
    /// Pending batches carry into it (they are on their way to the cart; Mealz counts them), and
    /// the WebView's basis is them alone. So do the rolled-back ones (outside the basis): no cart
    /// showed them — the paid cart would have confirmed them — so they are on their way too, and
    /// an acknowledgement or a late echo after the payment makes them the new basket's share.
    mutating func closeBasket() -> SyncEffect {
        state.confirmed = [:]
        state.shareFollowedAhead = [:]
        state.viewBase = [:]
        state.viewCountsThrough = nil
        // The pending batches the paid cart showed applied were paid with it: they do not carry
        // into the new basket, and their acknowledgement, when it comes, adds nothing to its share.
        if let shows = state.cartShowsThrough, let first = state.pending.first?.seq, first <= shows { state.paidThrough = shows }
        state.basket += 1
        return .basketClosed(newBasket: state.basket)
    }
}
