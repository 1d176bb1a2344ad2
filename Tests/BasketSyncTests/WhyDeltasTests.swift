import BasketSync
import Testing

/// Why Mealz → host messages are deltas: the same interleaving, run under the old absolute
/// "set quantity" model and under the delta model.
@Suite struct WhyDeltasTests {
    /// The old model: each message sets a line to an absolute quantity, computed by its sender from
    /// the cart it last saw.
    struct AbsoluteHost {
        var cart: [String: Int]
        mutating func set(_ id: String, to quantity: Int) { cart[id] = quantity }
    }

    @Test func concurrentAddsLoseAnUpdateUnderSetQuantityButNotUnderDeltas() throws {
        // The shopper has 1 pasta. Recipe 1 (Mealz) and the shopper each add one at the same time,
        // and recipe 2 (Mealz) adds one too, all from the same snapshot of the cart.
        let snapshot = ["pasta": 1]

        var absolute = AbsoluteHost(cart: snapshot)
        absolute.set("pasta", to: snapshot["pasta"]! + 1)  // recipe 1
        absolute.set("pasta", to: snapshot["pasta"]! + 1)  // the shopper, in the host cart
        absolute.set("pasta", to: snapshot["pasta"]! + 1)  // recipe 2
        #expect(absolute.cart["pasta"] == 2, "set-quantity keeps one add of three")

        var s = Transcript()
        _ = try s.cart(0, lines(("pasta", 1)), syncedThrough: 0)
        let recipe1 = try s.delta(1, lines(("pasta", 1)), source: "recipe-1")
        var host = snapshot
        host["pasta"]! += 1  // the shopper, in the host cart
        let recipe2 = try s.delta(2, lines(("pasta", 1)), source: "recipe-2")
        for case let .outbox(record) in recipe1 + recipe2 {
            for line in record.products { host[line.id, default: 0] += line.quantity }
        }
        #expect(host["pasta"] == 4, "deltas commute: every add is kept")
        _ = try s.cart(3, lines(("pasta", host["pasta"]!)), syncedThrough: 2)
        #expect(s.confirmed == ["pasta": 2], "Mealz counts its two units, not the shopper's")
        #expect(s.view == ["pasta": 4], "the WebView shows the cart it was told of")
    }
}
