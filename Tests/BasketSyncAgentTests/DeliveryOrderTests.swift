@testable import BasketSyncAgent
import Testing

/// The order of deliveries a scanning pass takes (docs/spec.md §4 rule 6): change time, then the
/// delivery time and counter of a Maildir name, then the name — and the neighbours no rule can
/// order (one change time, no delivery time in either name) are said.
@Suite struct DeliveryOrderTests {
    @Test func changeTimeThenMaildirTimeThenNameAndTiesWithoutMaildirTimesAreSaid() {
        let order = Inbox.deliveryOrder([
            (name: "f3a1-uuid-delta", changed: 100), (name: "0b2c-uuid-state", changed: 100),
            (name: "1700000000.M5P1Q2.host", changed: 100), (name: "1700000000.M5P1Q1.host", changed: 100),
            (name: "1700000000.M4P9Q7.host", changed: 100), (name: "later-uuid", changed: 200), (name: "zz-first", changed: 50),
        ])
        #expect(order.names == ["zz-first", "0b2c-uuid-state", "f3a1-uuid-delta",
                                "1700000000.M4P9Q7.host", "1700000000.M5P1Q1.host", "1700000000.M5P1Q2.host", "later-uuid"])
        // Two without a delivery time, and one without beside one with: neither can be ordered.
        #expect(order.unordered.map { [$0.0, $0.1] } == [["0b2c-uuid-state", "f3a1-uuid-delta"], ["f3a1-uuid-delta", "1700000000.M4P9Q7.host"]])
    }

    /// Names `push` gives (sixteen digits of microseconds first) and Python's `mailbox` names order
    /// by their time when the change times tie: nothing to say.
    @Test func maildirNamesInOneTickAreOrderedAndNotSaid() {
        let order = Inbox.deliveryOrder([
            (name: "0001700000000002.P12R9.basket-sync", changed: 7), (name: "0001700000000001.P12R3.basket-sync", changed: 7),
        ])
        #expect(order.names == ["0001700000000001.P12R3.basket-sync", "0001700000000002.P12R9.basket-sync"])
        #expect(order.unordered.isEmpty)
    }

    /// `SECONDS.<usec>_<n>.host` names order by their microseconds and counter, not as text
    /// (`99_5` after `123_4` would be wrong).
    @Test func microsecondAndCounterNamesOrderByNumber() {
        let order = Inbox.deliveryOrder([
            (name: "1700000000.123_4.host", changed: 7), (name: "1700000000.99_5.host", changed: 7),
            (name: "1700000000.123_10.host", changed: 7),
        ])
        #expect(order.names == ["1700000000.99_5.host", "1700000000.123_4.host", "1700000000.123_10.host"])
        #expect(order.unordered.isEmpty)
    }

    /// Names from different deliverers in one tick compare by the time each carries: `push`'s
    /// (a Maildir name, or its former sixteen digits of microseconds) against Python's `mailbox`
    /// names, whichever sorts first as text.
    @Test func namesOfDifferentDeliverersCompareByTheirTime() {
        for push in ["1796148731.M913896P3852Rcd48.basket-sync", "1796148731913896.P3852Rcd48.basket-sync"] {
            let order = Inbox.deliveryOrder([
                (name: "1796148732.M13896P4242Q1.mealzhost", changed: 7), (name: push, changed: 7),
                (name: "1796148731.M999999P1Q1.other", changed: 7),
            ])
            #expect(order.names == [push, "1796148731.M999999P1Q1.other", "1796148732.M13896P4242Q1.mealzhost"], "\(push)")
            #expect(order.unordered.isEmpty)
        }
    }
}
