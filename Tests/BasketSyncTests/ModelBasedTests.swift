import BasketSync
import Foundation
import Testing
import TestSupport

/// How the simulated host behaves in one run.
struct HostProfile: CustomStringConvertible, Sendable {
    /// When the host writes `syncedThrough`.
    enum Acknowledgement: Sendable { case always, never, lateFirst }

    var acknowledgement: Acknowledgement
    /// Chance per step that the host reads the outbox and writes its cart.
    var diligence: Double
    /// Chance that the host rejects (processes without applying) a batch.
    var rejection: Double = 0
    /// Chance per step that the shopper edits the host cart.
    var shopperEdits: Double = 0.2
    /// Whether the shopper may touch the SKUs Mealz pushes.
    var shopperTouchesMealzSkus = false
    /// Whether the host sometimes writes back a cart from before (a restored backup).
    var restoresOldCarts = false
    /// Whether a cart reaches the library only after more Mealz events (a slow host, a cron pass).
    var slowDelivery = false
    /// Whether WebView states are sometimes on their way while other inputs come (payments and
    /// store changes closing their basket, deltas, carts).
    var racingStates = true
    /// Whether an acknowledging host's counter now and then runs ahead: a claim of records that
    /// did not exist when the cart was written (then honest again, then ahead again).
    var claimsAhead = false
    /// Whether an acknowledging host now and then writes a cart without `syncedThrough` (a
    /// shopper-edit path that drops the field).
    var dropsTheField = false

    var description: String {
        "acknowledgement=\(acknowledgement) diligence=\(diligence) rejection=\(rejection) shopperEdits=\(shopperEdits) "
            + "shopperTouchesMealzSkus=\(shopperTouchesMealzSkus) restoresOldCarts=\(restoresOldCarts) slowDelivery=\(slowDelivery) "
            + "racingStates=\(racingStates) claimsAhead=\(claimsAhead) dropsTheField=\(dropsTheField)"
    }

    /// A host with which the cart must end holding exactly what Mealz asked for. A host that does
    /// not acknowledge, and is slow, or starts acknowledging late, meets the SDK's window race
    /// (docs/spec.md §4 rule 5): the WebView may push again what a rolled-back batch already added.
    /// So does one whose WebView states race: a state based on an older basis reverts recent
    /// batches, and a cart where they add up to nothing on a line cannot tell which were applied.
    var isExact: Bool {
        rejection == 0 && !shopperTouchesMealzSkus && !restoresOldCarts
            && (acknowledgement == .always || (acknowledgement == .never && diligence == 1 && !slowDelivery && !racingStates))
    }
}

/// The reference model: what docs/spec.md §4 says, computed from the effects alone, never from the
/// machine's state. The WebView's basis is the last notification (emptied when a payment closes
/// the basket) plus the batches still pending, applied as a host applies them. A notification
/// opening a basket (rule 7) must say that basis, batches on their way included: the basis is
/// then what it says, and the batches it counted are not added again.
struct ReferenceModel {
    var records: [OutboxRecord] = []
    var base: [ExactID: Int] = [:]
    var pending: [UInt64] = []
    /// Pending batches the last notification counted already: it opened a basket, or it was the
    /// cart of an acknowledging host that had applied them (whatever its claim said).
    var counted: Set<UInt64> = []
    /// While a cart of an acknowledging host is taken: the last record the host had really
    /// processed when it wrote that cart (the simulation knows it; the library does not).
    var cartApplied: UInt64?
    /// The same for the last cart taken: what a payment pays.
    var lastCartApplied: UInt64?
    /// Pending batches a payment paid: the cart it took held them applied. In no basket.
    var paid: Set<UInt64> = []
    /// Those the last payment paid.
    var paidAtClose: Set<UInt64> = []
    /// Whether a payment took a cart of a host whose claim said nothing (refused, or none) that
    /// could not tell which pending batches it held: a run of them adding up to nothing on
    /// every line it touches reads the same applied or not. The library's choice (another run
    /// the cart shows as well) is accepted; from then on neither the basis nor the host's final
    /// lines are judged (the rest is).
    var ambiguousPayment = false

    /// A payment whose cart could hold another run of the pending batches than the simulated
    /// host applied (see `ambiguousPayment`): the opening notification says the basis for paying
    /// another run of them. Takes that run as paid when one gives `lines`.
    mutating func paidOtherwise(_ lines: [ExactID: Int]) -> Bool {
        let before = paid.subtracting(paidAtClose)
        let open = pending.filter { !before.contains($0) }
        for count in 0...open.count {
            paid = before.union(open.prefix(count))
            if basis == lines {
                ambiguousPayment = true
                return true
            }
        }
        paid = before.union(paidAtClose)
        return false
    }
    /// The basket of the last notification: what a WebView that saw it sends back.
    var basket: UInt64 = 1
    /// What the effects got wrong against the rules.
    var problems: [String] = []

    var basis: [ExactID: Int] {
        var view = base
        for seq in pending where !counted.contains(seq) && !paid.contains(seq) { RetailerProduct.apply(records[Int(seq) - 1].products, to: &view) }
        return view
    }

    mutating func absorb(_ effects: [SyncEffect]) {
        for effect in effects {
            switch effect {
            case let .outbox(record):
                records.append(record)
                if record.type == .updateBasket { pending.append(record.seq) }
            case let .notify(notification):
                let lines = Dictionary(uniqueKeysWithValues: notification.products.map { (ExactID($0.id), $0.quantity) })
                if notification.basket != basket {
                    if lines != basis, !paidOtherwise(lines) {
                        problems.append("the notification opening basket \(notification.basket) says \(lines), not the basis \(basis)")
                    }
                    basket = notification.basket
                    counted = Set(pending)
                } else {
                    counted = Set(pending.filter { $0 <= (cartApplied ?? 0) })
                }
                base = lines
            case .basketClosed:
                base = [:]
                counted = []
                paidAtClose = Set(pending.filter { $0 <= (lastCartApplied ?? 0) && !paid.contains($0) })
                paid.formUnion(paidAtClose)
            case let .settled(seq):
                pending.removeAll { $0 == seq }
            case let .rolledBack(batch):
                pending.removeAll { $0 == batch.seq }
            case .payment, .lateEcho, .staleState, .lateAcknowledgement, .ignored, .duplicateTransfer, .paymentAlreadyRecorded,
                 .acknowledgementBeyondOutbox, .acknowledgementBeforeRecords, .acknowledgementMissing, .acknowledgementWentBack, .storeChanged, .armTimer, .disarmTimer,
                 .clampedAtLimit:
                break
            }
        }
    }
}

/// One seeded interleaving: the Mealz UI and WebView, a host and its shopper, payments, store
/// changes and restarts, driving the state machine, checked against the reference model after
/// every step.
struct Interleaving {
    var rng: SplitMix64
    let profile: HostProfile
    var machine = SyncStateMachine(state: SyncState(syncId: "m"), isSynchronizerRegistered: true)
    var model = ReferenceModel()
    var now: Double = 0
    var timer: Double?
    var step = 0
    var failures: [String] = []

    /// What the Mealz side asked for: deltas applied as a host applies them, states absolute.
    var intended: [ExactID: Int] = [:]
    /// The host: its cart, the last seq it processed, and carts written but not yet delivered.
    var host: [ExactID: Int] = ["x0": 2]
    var processed: UInt64 = 0
    var acknowledges: Bool
    var backups: [(cart: [ExactID: Int], processed: UInt64)] = []
    var inFlight: [(lines: [RetailerProduct], claim: UInt64?, lastSeq: UInt64, applied: UInt64?)] = []
    var orders: [String] = []
    var transfers = 0
    /// Whether the host has written `syncedThrough` in a cart yet.
    var claimedOnce = false
    /// At the end: the host writes honest carts only, so that everything can settle.
    var quiescing = false
    /// A WebView state on its way, with the basket it was based on.
    var stateInFlight: (lines: [RetailerProduct], basket: UInt64)?
    /// The pending batches as the last input left them (a copy), beside the machine's own undo.
    var pendingBeforeInput: [PendingBatch]?

    /// SKUs in canonical-equivalent spellings are distinct SKUs (docs/spec.md §4: ids compare byte
    /// for byte): `café` in NFC and in NFD are two Mealz SKUs, `K` is Mealz's while the Kelvin sign
    /// (U+212A, canonically `K`) is the shopper's. A library that merged them would double units.
    static let mealzSkus: [ExactID] = ["m0", "K", "caf\u{E9}", "cafe\u{301}"]
    static let shopperSkus: [ExactID] = ["x0", "x1", "\u{212A}"]

    init(seed: UInt64, profile: HostProfile) {
        rng = SplitMix64(seed: seed)
        self.profile = profile
        acknowledges = profile.acknowledgement == .always
    }

    mutating func chance(_ p: Double) -> Bool { Double.random(in: 0..<1, using: &rng) < p }

    mutating func fail(_ what: String) {
        if failures.count < 5 { failures.append("step \(step), t=\(now): \(what)") }
    }

    mutating func run(steps: Int) throws {
        _ = machine.setSelectedStore(externalId: "store-1", mode: .retailer, at: at(0))
        try writeCart()
        for index in 0..<steps {
            step = index
            now += Double(Int.random(in: 0...3, using: &rng))
            if profile.acknowledgement == .lateFirst, index == steps / 2 { acknowledges = true }
            fireTimerIfDue()
            switch Int.random(in: 0..<20, using: &rng) {
            case 0..<6: try mealzDelta()
            case 6..<9: try webViewState()
            case 9: try transfer()
            case 10: try input(machine.receive(.redirectToCart, source: "r\(index)", at: at(now)), "redirect")
            case 11: try pay()
            case 12: input(machine.setSelectedStore(externalId: "store-\(Int.random(in: 1...3, using: &rng))", mode: .retailer, at: at(now)), "store")
            case 13: try restart()
            case 14: try webViewRepeatsItself()
            default: break
            }
            if chance(profile.shopperEdits) { try shopperEdit() }
            if chance(profile.diligence) { try hostCatchesUp() }
            if chance(0.5) { try deliverCarts() }
            if profile.restoresOldCarts, chance(0.05) { try restoreOldCart() }
            if chance(0.3) { try deliverStateInFlight() }
            checkEveryStep()
        }
        // Quiescence: the host processes everything, the windows run out, the host writes again.
        acknowledges = acknowledges || profile.acknowledgement == .lateFirst
        quiescing = true
        try deliverStateInFlight()
        try hostCatchesUp()
        try deliverCarts()
        now += 1_000
        fireTimerIfDue()
        try hostCatchesUp()
        try deliverCarts()
        checkEveryStep()
        checkQuiescence()
    }

    // MARK: Inputs

    /// `BASKET_SYNC_TRACE=1` prints every input's effects, to follow a replayed seed.
    static let tracing = Knobs.value("BASKET_SYNC_TRACE", default: 0) == 1

    mutating func input(_ effects: [SyncEffect], _ what: @autoclosure () -> String = "") {
        if Interleaving.tracing {
            print("[\(step) t=\(now)] \(what()) host=\(host.sorted { $0.key < $1.key }) processed=\(processed) intended=\(intended.sorted { $0.key < $1.key })")
            for effect in effects { print("    \(effect)") }
        }
        model.absorb(effects)
        checkPendingUndoAndWindow()
        for effect in effects {
            if case let .armTimer(date) = effect { timer = date.timeIntervalSince(at(0)) }
            if case .disarmTimer = effect { timer = nil }
        }
        if effects.filter({ if case .outbox = $0 { true } else { false } }).count > 1 { fail("one input made several outbox records") }
    }

    /// What undoes an input's change of the pending batches (the agent takes an input back with
    /// it, not with a copy) gives back a copy taken before it, and says whether they changed; the
    /// earliest window the machine keeps (and hands on in its memo) is the one a walk finds.
    mutating func checkPendingUndoAndWindow() {
        if let undo = machine.pendingUndo, let before = pendingBeforeInput {
            let undone = undo.undo(machine.state.pending)
            if undone != before { fail("the pending batches' undo gives \(undone.map(\.seq)), they were \(before.map(\.seq)) (or their windows differ)") }
            if undo.changed(machine.state.pending) != (machine.state.pending != before) {
                fail("the undo says the pending batches \(undo.changed(machine.state.pending) ? "changed" : "did not change"); before \(before.map(\.seq)), now \(machine.state.pending.map(\.seq))")
            }
        }
        let walked = machine.state.pending.compactMap(\.deadline).min()
        if machine.nextDeadline != walked { fail("the earliest window kept is \(String(describing: machine.nextDeadline)), a walk finds \(String(describing: walked))") }
        var again = SyncStateMachine(state: machine.state, isSynchronizerRegistered: true)
        again.memo = machine.memo
        if again.knowNextDeadline() != walked { fail("a machine given the memo knows the earliest window as \(String(describing: again.nextDeadline)), a walk finds \(String(describing: walked))") }
        pendingBeforeInput = machine.state.pending
        machine.keepPendingUndo()
    }

    mutating func fireTimerIfDue() {
        guard let due = timer, due <= now else { return }
        input(machine.expireWindows(at: at(now)), "timer")
    }

    mutating func mealzDelta() throws {
        var batch: [RetailerProduct] = []
        // As the Mealz UI does: one line per SKU, never removing more than it shows.
        for id in Interleaving.mealzSkus.shuffled(using: &rng).prefix(Int.random(in: 1...3, using: &rng)) {
            let have = intended[id] ?? 0
            let quantity = have > 0 && chance(0.4) ? -Int.random(in: 1...have, using: &rng) : Int.random(in: 1...3, using: &rng)
            batch.append(RetailerProduct(id: id.string, quantity: quantity))
        }
        RetailerProduct.apply(batch, to: &intended)
        try input(machine.receive(.basketDelta(batch), source: "d\(step)", at: at(now)), "delta \(batch)")
    }

    /// The WebView sends its whole basket: what it was told, with the shopper's changes in it,
    /// and the basket of the last notification it saw. Now and then the state is on its way
    /// while other inputs come (a payment, a store change): it arrives later.
    mutating func webViewState() throws {
        var state = model.basis
        for _ in 0..<Int.random(in: 1...2, using: &rng) {
            state[Interleaving.mealzSkus.randomElement(using: &rng)!] = Int.random(in: 0...4, using: &rng)
        }
        if chance(0.2), let dropped = state.keys.sorted().randomElement(using: &rng) { state[dropped] = nil }
        let lines = state.keys.sorted().map { RetailerProduct(id: $0.string, quantity: state[$0]!) }
        // A WebView that sends no basket is diffed against the current basis: it may not race.
        let basket: UInt64? = chance(0.15) ? nil : model.basket
        if basket != nil, profile.racingStates, stateInFlight == nil, chance(0.3) {
            stateInFlight = (lines, basket!)
        } else {
            try deliverState(lines, basket: basket)
        }
    }

    /// A state reaches the library: diffed when it is for the current basket (the WebView asked
    /// for it), ignored and pushing nothing when a payment or a store change closed its basket.
    mutating func deliverState(_ lines: [RetailerProduct], basket: UInt64?) throws {
        let effects = try machine.receive(.basketState(lines, basket: basket), source: "s\(step)", at: at(now))
        input(effects, "state \(lines) basket \(basket.map(String.init) ?? "-")")
        if let basket, basket != model.basket {
            if effects.contains(where: { if case .outbox = $0 { true } else { false } }) {
                fail("a state for closed basket \(basket) (current \(model.basket)) pushed \(effects)")
            }
            if !effects.contains(where: { if case .staleState = $0 { true } else { false } }) {
                fail("a state for closed basket \(basket) was not reported stale: \(effects)")
            }
        } else {
            intended = Dictionary(uniqueKeysWithValues: lines.map { (ExactID($0.id), $0.quantity) }).filter { $0.value > 0 }
        }
    }

    mutating func deliverStateInFlight() throws {
        guard let (lines, basket) = stateInFlight else { return }
        stateInFlight = nil
        try deliverState(lines, basket: basket)
    }

    /// The WebView repeats what it was told: that must push nothing.
    mutating func webViewRepeatsItself() throws {
        let basis = model.basis
        let effects = try machine.receive(.basketState(basis.keys.sorted().map { RetailerProduct(id: $0.string, quantity: basis[$0]!) }), source: "same\(step)", at: at(now))
        input(effects, "state repeated \(basis)")
        if effects.contains(where: { if case .outbox = $0 { true } else { false } }) {
            fail("a basketState equal to the WebView's basis \(basis) pushed \(effects)")
        }
    }

    mutating func transfer() throws {
        // Transfer ids repeat now and then: a transfer lands once.
        let transferId = "t\(chance(0.3) ? max(0, transfers - 1) : transfers)"
        transfers += 1
        let lines = [RetailerProduct(id: Interleaving.mealzSkus.randomElement(using: &rng)!.string, quantity: Int.random(in: 1...2, using: &rng))]
        let effects = try machine.receive(.basketTransfer(lines, transferId: transferId), source: "tr\(step)", at: at(now))
        if effects.contains(where: { if case .outbox = $0 { true } else { false } }) { RetailerProduct.apply(lines, to: &intended) }
        input(effects, "transfer \(transferId) \(lines)")
    }

    /// A checkout: recorded (with Mealz products), skipped (none), or a retry of the last order.
    mutating func pay() throws {
        // The checkout starts from the cart the library has: a cart still in flight is taken first
        // (a batch the host applied but has not reported would otherwise carry into the new basket
        // although the payment bought it).
        try deliverCarts()
        let retry = chance(0.3) && !orders.isEmpty
        let orderId = retry ? orders.last! : "o\(step)"
        let onlyShopper = chance(0.3)
        let bought = host.filter { onlyShopper ? !Interleaving.mealzSkus.contains($0.key) : true }
        let lines = bought.keys.sorted().map { RetailerProduct(id: $0.string, quantity: bought[$0]!) }
        let effects = try machine.handlePayment(totalPrice: Money("10.00")!, productList: lines, orderId: orderId, at: at(now))
        input(effects, "pay \(orderId) \(lines)")
        if !retry { orders.append(orderId) }
        let recorded = effects.contains { if case let .payment(record) = $0 { record.status == .recorded } else { false } }
        let closed = effects.contains { if case .basketClosed = $0 { true } else { false } }
        if recorded != closed { fail("a payment recorded=\(recorded) closed the basket=\(closed): \(effects)") }
        if retry, effects != [.paymentAlreadyRecorded(orderId: orderId, seq: machine.state.recordedOrders[ExactID(orderId)] ?? 0)] {
            fail("a retried order was not answered as already recorded: \(effects)")
        }
        if closed {
            // The completion empties the host cart; the new basket holds what is on its way.
            host = host.filter { !Interleaving.mealzSkus.contains($0.key) }
            intended = model.basis
            try writeCart()
        }
    }

    mutating func shopperEdit() throws {
        let pool = profile.shopperTouchesMealzSkus ? Interleaving.shopperSkus + Interleaving.mealzSkus : Interleaving.shopperSkus
        host[pool.randomElement(using: &rng)!] = Int.random(in: 0...4, using: &rng)
        host = host.filter { $0.value > 0 }
        try writeCart()
    }

    /// The host applies the outbox as `apply` does: after the highest seq acknowledged.
    mutating func hostCatchesUp() throws {
        let start = acknowledges ? max(processed, machine.state.hostSyncedThrough ?? 0) : processed
        for record in model.records where record.seq > start {
            if record.type == .updateBasket, !chance(profile.rejection) {
                RetailerProduct.apply(record.products, to: &host)
            }
            processed = record.seq
        }
        if profile.restoresOldCarts, chance(0.3) { backups.append((host, processed)) }
        try writeCart()
    }

    mutating func restoreOldCart() throws {
        guard let backup = backups.randomElement(using: &rng) else { return }
        (host, processed) = backup
        try writeCart()
    }

    /// The host writes its cart; it reaches the library now, or later for a slow host.
    mutating func writeCart() throws {
        let lines = host.keys.sorted().map { RetailerProduct(id: $0.string, quantity: host[$0]!) }
        var claim: UInt64? = acknowledges ? processed : nil
        if acknowledges, profile.claimsAhead, !quiescing, chance(0.1) { claim = UInt64(model.records.count) + UInt64(Int.random(in: 1...50, using: &rng)) }
        // Once it has written the field: before, it is a host that never acknowledged (as the
        // SDK's, its batches wait for an echo).
        if acknowledges, profile.dropsTheField, claimedOnce, !quiescing, chance(0.1) { claim = nil }
        if claim != nil { claimedOnce = true }
        inFlight.append((lines, claim, UInt64(model.records.count), acknowledges ? processed : nil))
        if !profile.slowDelivery { try deliverCarts() }
    }

    mutating func deliverCarts() throws {
        let carts = inFlight
        inFlight = []
        for cart in carts {
            let effects = try machine.retailerBasketChanged(cart.lines, syncedThrough: cart.claim, outboxSeqWhenWritten: cart.lastSeq, at: at(now))
            model.cartApplied = cart.applied
            model.lastCartApplied = cart.applied
            defer { model.cartApplied = nil }
            input(effects, "cart \(cart.lines) claim \(cart.claim.map(String.init) ?? "-") written at seq \(cart.lastSeq)")
            // Nothing settles before the host could have seen it.
            let settled = effects.compactMap { effect -> UInt64? in
                if case let .settled(seq) = effect { return seq }
                if case let .lateEcho(seq) = effect { return seq }
                if case let .lateAcknowledgement(seq) = effect { return seq }
                return nil
            }
            for seq in settled where seq > cart.lastSeq {
                fail("batch #\(seq) settled by a cart written when the outbox ended at \(cart.lastSeq)")
            }
            // Mealz's share follows the cart downward: never more than the cart holds.
            let inCart = Dictionary(cart.lines.map { (ExactID($0.id), $0.quantity) }, uniquingKeysWith: +)
            for (id, share) in machine.mealzShare where share > (inCart[id] ?? 0) {
                fail("Mealz's share of \(id) is \(share) but the cart holds \(inCart[id] ?? 0)")
            }
        }
    }

    mutating func restart() throws {
        let state = try JSONDecoder().decode(SyncState.self, from: JSONEncoder().encode(machine.state))
        if state != machine.state { fail("the state did not survive a restart") }
        let memo = machine.memo
        machine = SyncStateMachine(state: state, isSynchronizerRegistered: true)
        // The same state: what the last machine knew is good for it.
        machine.memo = memo
    }

    // MARK: Invariants

    mutating func checkEveryStep() {
        for problem in model.problems { fail(problem) }
        model.problems = []
        // After an ambiguous payment the model holds the library's choice beside the simulated
        // host's truth: the basis is no longer judged (the other invariants are).
        if !model.ambiguousPayment, machine.mealzView != model.basis {
            fail("the WebView's basis is \(machine.mealzView), the reference model says \(model.basis)")
        }
        let seqs = model.records.map(\.seq)
        if seqs != Array(stride(from: UInt64(1), through: UInt64(seqs.count), by: 1)) { fail("outbox seqs skip or repeat: \(seqs)") }
        if profile.isExact, !model.ambiguousPayment, profile.acknowledgement == .always, !profile.slowDelivery, model.basis != intended {
            fail("the WebView's basis \(model.basis) is not what Mealz asked for \(intended)")
        }
    }

    mutating func checkQuiescence() {
        if !machine.state.pending.isEmpty { fail("batches still pending after quiescence: \(machine.state.pending.map(\.seq))") }
        if Set(model.records.map(\.id)).count != model.records.count { fail("outbox ids repeat") }
        if profile.isExact, !model.ambiguousPayment {
            let mealzPart = host.filter { Interleaving.mealzSkus.contains($0.key) && $0.value > 0 }
            if mealzPart != intended.filter({ $0.value > 0 }) {
                fail("the host's Mealz lines \(mealzPart) are not what Mealz asked for \(intended): a delta was lost or doubled")
            }
        }
    }
}

/// The model-based test: seeded interleavings against the reference model. `BASKET_SYNC_SEED=n`
/// replays one; `BASKET_SYNC_INTERLEAVINGS=n` sets how many per profile.
@Suite struct ModelBasedTests {
    static let profiles: [HostProfile] = [
        HostProfile(acknowledgement: .always, diligence: 0.5),
        HostProfile(acknowledgement: .always, diligence: 0.1, shopperEdits: 0),
        HostProfile(acknowledgement: .always, diligence: 0.5, slowDelivery: true),
        HostProfile(acknowledgement: .always, diligence: 0.5, rejection: 0.2, shopperTouchesMealzSkus: true),
        HostProfile(acknowledgement: .always, diligence: 0.4, restoresOldCarts: true),
        HostProfile(acknowledgement: .always, diligence: 0.5, claimsAhead: true),
        HostProfile(acknowledgement: .always, diligence: 0.5, dropsTheField: true),
        HostProfile(acknowledgement: .lateFirst, diligence: 0.3),
        HostProfile(acknowledgement: .never, diligence: 1, racingStates: false),
        HostProfile(acknowledgement: .never, diligence: 1),
        HostProfile(acknowledgement: .never, diligence: 1, slowDelivery: true),
        HostProfile(acknowledgement: .never, diligence: 0.3, rejection: 0.1, shopperTouchesMealzSkus: true),
    ]

    static var seeds: [UInt64] {
        if let seed = Knobs.replaySeed { return [seed] }
        let first = Knobs.value("BASKET_SYNC_FIRST_SEED", default: UInt64(1))
        let count = Knobs.value("BASKET_SYNC_INTERLEAVINGS", default: UInt64(500))
        return Array(first..<(first + count))
    }

    @Test(arguments: profiles.indices)
    func interleavingsAgreeWithTheReferenceModel(profileIndex: Int) throws {
        // `BASKET_SYNC_PROFILE=n` runs one profile alone, to trace it.
        let only = Knobs.value("BASKET_SYNC_PROFILE", default: -1)
        if only >= 0, only != profileIndex { return }
        let profile = Self.profiles[profileIndex]
        var records = 0
        for seed in Self.seeds {
            var interleaving = Interleaving(seed: seed, profile: profile)
            try interleaving.run(steps: 80)
            records += interleaving.model.records.count
            #expect(interleaving.failures.isEmpty, """
                seed \(seed) (replay: BASKET_SYNC_SEED=\(seed) swift test --filter ModelBasedTests), \
                profile \(profileIndex) \(profile): \(interleaving.failures)
                """)
            if !interleaving.failures.isEmpty { break }
        }
        #expect(records > Self.seeds.count, "the interleavings must exercise the outbox")
    }
}
