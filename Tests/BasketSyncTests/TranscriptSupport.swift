import BasketSync
import Testing
import TestSupport

/// Builds lines in the order written: `lines(("A", 2), ("B", -1))`.
func lines(_ pairs: (String, Int)...) -> [RetailerProduct] {
    pairs.map { RetailerProduct(id: $0.0, quantity: $0.1) }
}

/// The instant `t` seconds into a transcript.
func at(_ t: Double) -> Date { Date(timeIntervalSinceReferenceDate: 1_000_000 + t) }

func money(_ text: String) -> Money {
    guard let value = Money(text) else { fatalError("bad amount in a test: \(text)") }
    return value
}

/// A transcript of the state machine: each call feeds one input at second `t` and returns the
/// effects, to be compared whole with `#expect(… == […])`.
struct Transcript {
    var machine: SyncStateMachine

    init(registered: Bool = true, window: Duration = .seconds(10), syncId: String = "s", maxQuantity: Int = 1_000_000) {
        machine = SyncStateMachine(
            state: SyncState(syncId: syncId), configuration: SyncConfiguration(pendingTimeout: window, maxQuantity: maxQuantity),
            isSynchronizerRegistered: registered)
    }

    mutating func delta(_ t: Double, _ products: [RetailerProduct], source: String? = nil) throws -> [SyncEffect] {
        try machine.receive(.basketDelta(products), source: source, at: at(t))
    }

    mutating func state(_ t: Double, _ products: [RetailerProduct], source: String? = nil) throws -> [SyncEffect] {
        try machine.receive(.basketState(products), source: source, at: at(t))
    }

    /// A cart taken at second `t`; `writtenAt`, the second it was written when that is earlier.
    mutating func cart(_ t: Double, _ products: [RetailerProduct], syncedThrough: UInt64? = nil, writtenWhenLastSeqWas: UInt64? = nil, writtenAt: Double? = nil) throws -> [SyncEffect] {
        try machine.retailerBasketChanged(products, syncedThrough: syncedThrough, outboxSeqWhenWritten: writtenWhenLastSeqWas, writtenAt: writtenAt.map(at), at: at(t))
    }

    mutating func tick(_ t: Double) -> [SyncEffect] { machine.expireWindows(at: at(t)) }

    var view: [ExactID: Int] { machine.mealzView }
    var confirmed: [ExactID: Int] { machine.state.confirmed }
    var pendingSeqs: [UInt64] { machine.state.pending.map(\.seq) }

    /// Saves the state as the agent does and resumes from it, as after a restart.
    mutating func restart() throws {
        let data = try JSONEncoder().encode(machine.state)
        let state = try JSONDecoder().decode(SyncState.self, from: data)
        machine = SyncStateMachine(
            state: state, configuration: machine.configuration,
            isSynchronizerRegistered: machine.isSynchronizerRegistered)
    }
}

/// The `updateBasket` effect expected for batch `seq` made at second `t`.
func update(_ seq: UInt64, _ t: Double, _ products: [RetailerProduct], source: String? = nil, syncId: String = "s", transferId: String? = nil) -> SyncEffect {
    .outbox(OutboxRecord(
        seq: seq, id: "\(syncId)-\(seq)", type: .updateBasket, at: at(t), source: source,
        products: products, transferId: transferId))
}

/// The `notifyRetailerBasketChanged` effect expected.
func notify(_ seq: UInt64, _ t: Double, _ products: [RetailerProduct], syncedThrough: UInt64? = nil, basket: UInt64 = 1) -> SyncEffect {
    .notify(BasketNotification(seq: seq, at: at(t), products: products, syncedThrough: syncedThrough, basket: basket))
}

/// A random Mealz batch of one or two lines on `skus`: additions of 1–3, and removals that take
/// only units Mealz pushed (Mealz's units per SKU, kept in `mealz`, never go below 0 in seq order).
func mealzBatch(on skus: [String], mealz: inout [String: Int], rng: inout SplitMix64) -> [(String, Int)] {
    var lines: [(String, Int)] = []
    for id in skus.shuffled(using: &rng).prefix(1 + rng.below(2)) {
        let have = mealz[id] ?? 0
        let delta = have > 0 && rng.below(3) == 0 ? -(1 + rng.below(have)) : 1 + rng.below(3)
        mealz[id] = have + delta
        lines.append((id, delta))
    }
    return lines
}
