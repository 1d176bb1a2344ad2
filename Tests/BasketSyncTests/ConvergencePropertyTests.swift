import BasketSync
import Foundation
import Testing
import TestSupport

/// How the simulated host behaves in one run.
struct HostProfile: CustomStringConvertible {
    /// Writes `syncedThrough` in its cart.
    var acknowledges: Bool
    /// Chance per step that the host reads the outbox and writes its cart.
    var diligence: Double
    /// Chance that the host rejects (acknowledges without applying) a batch.
    var rejection: Double
    /// Chance per step that the shopper edits the host cart.
    var shopperEdits: Double
    /// Whether the shopper may touch the SKUs Mealz pushes (off keeps the Mealz part exact).
    var shopperTouchesMealzSkus: Bool

    var description: String {
        "acknowledges=\(acknowledges) diligence=\(diligence) rejection=\(rejection) shopperEdits=\(shopperEdits) shopperTouchesMealzSkus=\(shopperTouchesMealzSkus)"
    }

    /// A host with which Mealz's view must equal exactly what Mealz asked for.
    var isExact: Bool { rejection == 0 && (shopperEdits == 0 || !shopperTouchesMealzSkus) && (acknowledges || diligence == 1) }
}

/// One run of the simulation: a Mealz side, a host, a shopper and the state machine, with restarts.
struct Simulation {
    var rng: SplitMix64
    let profile: HostProfile
    var machine = SyncStateMachine(state: SyncState(syncId: "p"), isSynchronizerRegistered: true)
    var now: Double = 0
    var timer: Double?

    /// Every outbox record emitted, across restarts: the outbox file.
    var outbox: [OutboxRecord] = []
    /// Mealz's intention: what the Mealz UI asked for (deltas clamped at 0, states absolute).
    var intended: [String: Int] = [:]
    /// The host's cart and how far it has processed the outbox.
    var host: [String: Int]
    var processed: UInt64 = 0
    var failures: [String] = []

    static let mealzSkus = ["m0", "m1", "m2", "m3"]
    static let shopperSkus = ["x0", "x1", "x2"]

    init(seed: UInt64, profile: HostProfile) {
        rng = SplitMix64(seed: seed)
        self.profile = profile
        host = ["x0": 2]
    }

    mutating func chance(_ p: Double) -> Bool { Double.random(in: 0..<1, using: &rng) < p }

    mutating func run(steps: Int) throws {
        try writeCart()
        for _ in 0..<steps {
            now += Double(Int.random(in: 0...3, using: &rng))
            fireTimerIfDue()
            switch Int.random(in: 0..<10, using: &rng) {
            case 0..<3: try mealzDelta()
            case 3..<5: try mealzState()
            case 5: try restart()
            default: break
            }
            if chance(profile.shopperEdits) { try shopperEdit() }
            if chance(profile.diligence) { try hostCatchesUp() }
            checkView()
        }
        // Quiescence: the host processes everything, the windows run out, the host writes again.
        try hostCatchesUp()
        now += 1_000
        fireTimerIfDue()
        try writeCart()
        checkSeqs()
        checkQuiescence()
    }

    mutating func fireTimerIfDue() {
        guard let due = timer, due <= now else { return }
        absorb(machine.expireWindows(at: at(now)))
    }

    mutating func absorb(_ effects: [SyncEffect]) {
        var outboxRecords = 0
        for effect in effects {
            switch effect {
            case let .outbox(record):
                outbox.append(record)
                outboxRecords += 1
            case let .armTimer(date): timer = date.timeIntervalSince(at(0))
            case .disarmTimer: timer = nil
            default: break
            }
        }
        if outboxRecords > 1 { failures.append("one input made \(outboxRecords) outbox records") }
    }

    mutating func mealzDelta() throws {
        var batch: [RetailerProduct] = []
        for _ in 0..<Int.random(in: 1...3, using: &rng) {
            let id = Simulation.mealzSkus.randomElement(using: &rng)!
            let have = intended[id] ?? 0
            // Mostly adds; removals never more than Mealz has, as the Mealz UI does.
            let quantity = have > 0 && chance(0.4) ? -Int.random(in: 1...have, using: &rng) : Int.random(in: 1...3, using: &rng)
            batch.append(RetailerProduct(id: id, quantity: quantity))
            intended[id] = have + quantity
        }
        absorb(try machine.receive(.basketDelta(batch), source: "d\(outbox.count)", at: at(now)))
    }

    mutating func mealzState() throws {
        // The WebView shows Mealz's view, with a change or two.
        var state = machine.mealzView
        for _ in 0..<Int.random(in: 0...2, using: &rng) {
            state[Simulation.mealzSkus.randomElement(using: &rng)!] = Int.random(in: 0...4, using: &rng)
        }
        // A SKU missing from the state goes to 0.
        if chance(0.2), let dropped = state.keys.sorted().randomElement(using: &rng) { state[dropped] = nil }
        intended = state.filter { $0.value > 0 }
        let products = state.keys.sorted().map { RetailerProduct(id: $0, quantity: state[$0]!) }
        absorb(try machine.receive(.basketState(products), source: "s\(outbox.count)", at: at(now)))
    }

    mutating func shopperEdit() throws {
        let pool = profile.shopperTouchesMealzSkus ? Simulation.shopperSkus + Simulation.mealzSkus : Simulation.shopperSkus
        let id = pool.randomElement(using: &rng)!
        host[id] = Int.random(in: 0...4, using: &rng)
        try writeCart()
    }

    mutating func hostCatchesUp() throws {
        for record in outbox where record.seq > processed {
            if record.type == .updateBasket, !chance(profile.rejection) {
                RetailerProduct.apply(record.products, to: &host)
            }
            processed = record.seq
        }
        try writeCart()
    }

    mutating func writeCart() throws {
        let products = host.keys.sorted().map { RetailerProduct(id: $0, quantity: host[$0]!) }
        absorb(try machine.retailerBasketChanged(products, syncedThrough: profile.acknowledges ? processed : nil, at: at(now)))
    }

    mutating func restart() throws {
        let data = try JSONEncoder().encode(machine.state)
        let state = try JSONDecoder().decode(SyncState.self, from: data)
        if state != machine.state { failures.append("the state did not survive a restart") }
        machine = SyncStateMachine(state: state, isSynchronizerRegistered: true)
    }

    mutating func checkView() {
        if profile.isExact && profile.acknowledges && machine.mealzView != intended.filter({ $0.value > 0 }) {
            failures.append("at \(now): Mealz's view \(machine.mealzView) is not what Mealz asked for \(intended)")
        }
    }

    mutating func checkSeqs() {
        let seqs = outbox.map(\.seq)
        if seqs != Array(1...UInt64(max(seqs.count, 1))).prefix(seqs.count).map({ $0 }) {
            failures.append("outbox seqs skip or repeat: \(seqs)")
        }
        if Set(outbox.map(\.id)).count != outbox.count { failures.append("outbox ids repeat") }
    }

    mutating func checkQuiescence() {
        let view = machine.mealzView
        if !machine.state.pending.isEmpty { failures.append("batches still pending after quiescence") }
        for (id, quantity) in view where quantity > (host[id] ?? 0) {
            failures.append("Mealz counts \(quantity) of \(id) but the host has \(host[id] ?? 0)")
        }
        let related = machine.mealzRelatedIds
        let expected = host.filter { related.contains($0.key) && $0.value > 0 }
        if machine.state.lastNotified != expected {
            failures.append("the last notification \(machine.state.lastNotified ?? [:]) is not the Mealz part of the cart \(expected)")
        }
        if profile.isExact {
            let mealzPart = host.filter { Simulation.mealzSkus.contains($0.key) && $0.value > 0 }
            if mealzPart != intended.filter({ $0.value > 0 }) {
                failures.append("the host's Mealz lines \(mealzPart) are not what Mealz asked for \(intended): a delta was lost or doubled")
            }
            if view != mealzPart { failures.append("Mealz's view \(view) is not the host's Mealz lines \(mealzPart)") }
        }
    }
}

@Suite struct ConvergencePropertyTests {
    static let profiles: [HostProfile] = [
        HostProfile(acknowledges: true, diligence: 0.5, rejection: 0, shopperEdits: 0.2, shopperTouchesMealzSkus: false),
        HostProfile(acknowledges: true, diligence: 0.1, rejection: 0, shopperEdits: 0, shopperTouchesMealzSkus: false),
        HostProfile(acknowledges: true, diligence: 0.5, rejection: 0.2, shopperEdits: 0.2, shopperTouchesMealzSkus: true),
        HostProfile(acknowledges: false, diligence: 1, rejection: 0, shopperEdits: 0.2, shopperTouchesMealzSkus: false),
        HostProfile(acknowledges: false, diligence: 0.3, rejection: 0.1, shopperEdits: 0.2, shopperTouchesMealzSkus: true),
    ]

    /// `BASKET_SYNC_SEED=n` replays one seed; `BASKET_SYNC_RUNS=n` sets how many seeds per profile.
    static var seeds: [UInt64] {
        if let seed = Knobs.replaySeed { return [seed] }
        let runs = Knobs.value("BASKET_SYNC_RUNS", default: UInt64(1_000))
        return Array(1...runs)
    }

    @Test(arguments: profiles.indices)
    func randomInterleavingsConverge(profileIndex: Int) throws {
        let profile = Self.profiles[profileIndex]
        var batches = 0
        for seed in Self.seeds {
            var simulation = Simulation(seed: seed, profile: profile)
            try simulation.run(steps: 80)
            batches += simulation.outbox.count
            #expect(simulation.failures.isEmpty, """
                seed \(seed) (replay: BASKET_SYNC_SEED=\(seed) swift test --filter ConvergencePropertyTests), \
                profile \(profile): \(simulation.failures.prefix(3))
                """)
            if !simulation.failures.isEmpty { break }
        }
        #expect(batches > Self.seeds.count, "the simulation must exercise the outbox")
    }
}
