import BasketSync
import Testing

/// The worked transcripts of docs/spec.md §4 (shown in docs/library.md), line by line.
@Suite struct SpecTranscriptTests {
    @Test func acknowledgingHost() throws {
        var s = Transcript()
        #expect(try s.delta(0, lines(("A", 2), ("B", 1)), source: "evt-42")
            == [update(1, 0, lines(("A", 2), ("B", 1)), source: "evt-42"), .armTimer(at: at(10))])
        #expect(s.view == ["A": 2, "B": 1])

        #expect(try s.cart(1, lines(("A", 2), ("B", 1), ("X", 4)), syncedThrough: 1)
            == [.settled(seq: 1), notify(1, 1, lines(("A", 2), ("B", 1)), syncedThrough: 1), .disarmTimer])
        #expect(s.confirmed == ["A": 2, "B": 1])
        #expect(s.pendingSeqs == [])

        // This host acknowledges: its batches have no window.
        #expect(try s.state(2, lines(("A", 3), ("B", 1))) == [update(2, 2, lines(("A", 1)))])
        #expect(s.view == ["A": 3, "B": 1])
        #expect(try s.state(3, lines(("A", 3))) == [update(3, 3, lines(("B", -1)))])
        #expect(s.view == ["A": 3])
        #expect(s.pendingSeqs == [2, 3])

        #expect(try s.cart(4, lines(("A", 2), ("B", 1), ("X", 4)), syncedThrough: 1) == [])
        #expect(s.view == ["A": 3])

        #expect(try s.cart(60, lines(("A", 3), ("X", 4)), syncedThrough: 3)
            == [.settled(seq: 2), .settled(seq: 3), notify(2, 60, lines(("A", 3)), syncedThrough: 3)])
        #expect(s.confirmed == ["A": 3])

        #expect(try s.cart(61, lines(("A", 2), ("X", 4)), syncedThrough: 3)
            == [notify(3, 61, lines(("A", 2)), syncedThrough: 3)])
        #expect(s.view == ["A": 2])

        #expect(try s.cart(62, lines(("A", 5), ("X", 4)), syncedThrough: 3)
            == [notify(4, 62, lines(("A", 5)), syncedThrough: 3)])
        #expect(s.confirmed == ["A": 2], "extra units the shopper adds are not Mealz's")
        #expect(s.view == ["A": 5], "the WebView shows what it was told")

        #expect(try s.state(63, lines(("A", 5))) == [])
        #expect(s.view == ["A": 5])

        #expect(try s.cart(64, lines(("X", 4)), syncedThrough: 3) == [notify(5, 64, [], syncedThrough: 3)])
        #expect(s.confirmed == [:])
        #expect(s.view == [:])
        #expect(s.machine.mealzRelatedIds == [])
    }

    @Test func hostWithoutSyncedThrough() throws {
        var s = Transcript()
        #expect(try s.delta(0, lines(("A", 1))) == [update(1, 0, lines(("A", 1))), .armTimer(at: at(10))])
        #expect(try s.cart(2, lines(("A", 1))) == [.settled(seq: 1), notify(1, 2, lines(("A", 1))), .disarmTimer])
        #expect(s.confirmed == ["A": 1])

        #expect(try s.delta(3, lines(("A", 1))) == [update(2, 3, lines(("A", 1))), .armTimer(at: at(13))])
        #expect(s.view == ["A": 2])
        #expect(s.machine.nextDeadline == at(13))

        #expect(s.tick(13) == [
            .rolledBack(PendingBatch(seq: 2, products: lines(("A", 1)), at: at(3), deadline: at(13))),
            .disarmTimer,
        ])
        #expect(s.view == ["A": 1])
        #expect(s.machine.nextDeadline == nil)

        // The host was late: its echo is reported, and #2 is confirmed after all.
        #expect(try s.cart(15, lines(("A", 2))) == [.lateEcho(seq: 2), notify(2, 15, lines(("A", 2)))])
        #expect(s.confirmed == ["A": 2])
        #expect(s.view == ["A": 2])
        #expect(s.machine.state.counters.rolledBack == 1)
        #expect(s.machine.state.counters.lateEchoes == 1)
    }

    @Test func anInputAfterAMissedTimerExpiresTheWindowFirst() throws {
        var s = Transcript()
        _ = try s.cart(0, [])
        _ = try s.delta(1, lines(("A", 1)))
        // No tick at 11: the cart at 12 must not settle the expired batch, only echo it late.
        #expect(try s.cart(12, lines(("A", 1))) == [
            .rolledBack(PendingBatch(seq: 1, products: lines(("A", 1)), at: at(1), deadline: at(11))),
            .lateEcho(seq: 1),
            notify(2, 12, lines(("A", 1))),
            .disarmTimer,
        ])
        #expect(s.confirmed == ["A": 1])
    }
}
