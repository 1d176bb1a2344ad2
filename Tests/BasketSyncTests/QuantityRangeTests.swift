@testable import BasketSync
import Foundation
import Testing
import TestSupport

/// An id's lines add up (the same id twice is one line of their sum): a sum past what a quantity
/// holds is refused, never held at `Int.max` as if it were the cart's quantity. The reference is
/// the sum taken wide (`Int128`), from the rule's words.
@Suite struct QuantityRangeTests {
    @Test func linesAddingUpPastARangeAreRefusedAndAnyOtherSumIsTakenExactly() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        var refused = 0, taken = 0
        for round in 0..<2_000 {
            let count = Int.random(in: 1...5, using: &rng)
            // Near the top of the range, or small: both sides of the bound, and exact sums.
            let lines = (0..<count).map { _ in
                RetailerProduct(id: Bool.random(using: &rng) ? "A" : "B",
                                quantity: Bool.random(using: &rng) ? Int.random(in: (Int.max / 3)...Int.max, using: &rng) : Int.random(in: 0...1_000, using: &rng))
            }
            // The lines added up in their order: the first id to go past the range is named.
            var wide: [String: Int128] = [:]
            var over: String?
            for line in lines {
                wide[line.id, default: 0] += Int128(line.quantity)
                if over == nil, wide[line.id]! > Int128(Int.max) { over = line.id }
            }
            var machine = SyncStateMachine(state: SyncState(syncId: "s"))
            do {
                _ = try machine.retailerBasketChanged(lines, syncedThrough: nil, at: Date(timeIntervalSince1970: 1_800_000_000))
                #expect(over == nil, "seed \(seed), round \(round): \(lines) taken although \(over ?? "") adds up past Int.max")
                for (id, sum) in wide where sum > 0 {
                    let held: Int128? = machine.state.hostCart?[ExactID(id)].map { Int128($0) }
                    #expect(held == sum, "seed \(seed), round \(round): \(id)")
                }
                taken += 1
            } catch {
                // Which id is named: the first whose lines went past the range.
                #expect(over != nil && error == SyncInputError.quantitiesOverflow(id: over ?? ""), "seed \(seed), round \(round): \(error) for \(lines)")
                refused += 1
            }
        }
        #expect(refused > 100 && taken > 100, "seed \(seed): both sides met (\(refused) refused, \(taken) taken)")
    }

    /// `maxQuantity` is at most 2^53 − 1, whatever is asked: sums of lines past it are then seen
    /// past it (a sum held at `Int.max` would not be).
    @Test func maxQuantityIsAtMostTwoToTheFiftyThreeLessOne() {
        var configuration = SyncConfiguration(maxQuantity: .max)
        #expect(configuration.maxQuantity == 9_007_199_254_740_991)
        configuration.maxQuantity = .max
        #expect(configuration.maxQuantity == SyncConfiguration.largestMaxQuantity)
        configuration.maxQuantity = 5
        #expect(configuration.maxQuantity == 5)
    }
}
