import BasketSync
import Testing

/// Recovery (`init --adopt`) as an input of the state machine: a machine plays a transcript, its
/// records are all that is left (the database lost), and a new machine recovers from them. Each
/// test says what the new machine must do next, as the records and the host's claim imply.
struct RecoveryTests {
    /// The records a transcript's effects wrote, as the files hold them.
    struct Files {
        var outbox: [OutboxRecord] = []
        var notifications: [BasketNotification] = []
        var payments: [PaymentRecord] = []

        mutating func keep(_ effects: [SyncEffect]) {
            for effect in effects {
                switch effect {
                case let .outbox(record): outbox.append(record)
                case let .notify(notification): notifications.append(notification)
                case let .payment(record): payments.append(record)
                default: break
                }
            }
        }

        func recovered(cartClaim: UInt64, cart: [RetailerProduct]? = nil) -> Transcript {
            var fresh = Transcript(syncId: "s2")
            let records = RecoveredRecords(outbox: outbox, notifications: notifications, payments: payments, cartClaim: cartClaim, cartLines: cart)
            #expect(fresh.machine.recover(from: records) == [])
            return fresh
        }
    }

    /// The cart's claim acknowledges more than the last notification said (the host applied #2
    /// and #3 after basket-sync last took its cart): those deltas are Mealz's share, as they
    /// would have been had that cart been taken before the loss — a payment counts them.
    @Test func theDeltasTheCartsClaimAcknowledgesAreMealzsShare() throws {
        var lost = Transcript()
        var files = Files()
        files.keep(try lost.cart(0, [], syncedThrough: 0))
        for t in 1...3 { files.keep(try lost.delta(Double(t), lines(("A", 1)))) }
        files.keep(try lost.cart(4, lines(("A", 1)), syncedThrough: 1))

        var recovered = files.recovered(cartClaim: 3, cart: lines(("A", 3)))
        #expect(recovered.pendingSeqs.isEmpty)
        #expect(recovered.confirmed == ["A": 3])
        #expect(recovered.view == ["A": 3], "the WebView's basis holds them too: its state repeated pushes nothing")
        _ = try recovered.cart(5, lines(("A", 3)), syncedThrough: 3)
        #expect(recovered.confirmed == ["A": 3])
    }

    /// A host that never acknowledged had #1–#3 settled by echoes, which no file says: recovery
    /// plays the files' history again and finds them, so neither that host nor one moving to
    /// apply (its cart now says syncedThrough 0) gets them twice.
    @Test func theBatchesAHostEchoedAreFoundAgain() throws {
        var lost = Transcript()
        var files = Files()
        files.keep(try lost.cart(0, []))
        for t in 1...3 {
            files.keep(try lost.delta(Double(t), lines(("A", 1))))
            files.keep(try lost.cart(Double(t) + 0.5, lines(("A", t))))
        }
        #expect(lost.machine.state.echoedThrough == 3)
        for claim: UInt64? in [nil, 0] {
            var fresh = Transcript(syncId: "s2")
            _ = fresh.machine.recover(from: RecoveredRecords(outbox: files.outbox, notifications: files.notifications, cartClaim: claim))
            #expect(fresh.pendingSeqs.isEmpty, "claim \(String(describing: claim))")
            #expect(fresh.machine.state.hostProgress(claim: claim, writtenThrough: 3) == 3, "claim \(String(describing: claim))")
        }
    }

    /// Every record gone (the host removed the outbox) and events taken since the cart was
    /// written: the next record is numbered after the claim and the records those events may
    /// have made — never a number a record had.
    @Test func noRecordLeftNumbersAfterTheEventsSinceTheCart() throws {
        var fresh = Transcript(syncId: "s2")
        _ = fresh.machine.recover(from: RecoveredRecords(cartClaim: 3, eventsSinceCart: 2))
        #expect(fresh.machine.state.lastOutboxSeq == 5)
    }

    /// A host without syncedThrough whose #2 was still in its window: pending again, in the
    /// basis, so the WebView repeating what it showed pushes nothing.
    @Test func aLegacyHostsBatchInItsWindowIsPendingAgain() throws {
        var lost = Transcript()
        var files = Files()
        files.keep(try lost.cart(0, []))
        files.keep(try lost.delta(1, lines(("A", 1))))
        files.keep(try lost.cart(2, lines(("A", 1))))
        files.keep(try lost.delta(3, lines(("B", 1))))
        var fresh = Transcript(syncId: "s2")
        _ = fresh.machine.recover(from: RecoveredRecords(outbox: files.outbox, notifications: files.notifications))
        #expect(fresh.pendingSeqs == [2])
        #expect(fresh.view == ["A": 1, "B": 1])
        #expect(try fresh.state(4, lines(("A", 1), ("B", 1))) == [])
    }

    /// The host moved the live outbox away after acknowledging 5 (the last notification says so,
    /// checked before the loss) while the files hold 1–2: the next record is 6, never 3 again.
    @Test func recordsGoOnAfterTheLastNotificationsAcknowledgement() throws {
        var lost = Transcript()
        var files = Files()
        files.keep(try lost.cart(0, [], syncedThrough: 0))
        for t in 1...5 { files.keep(try lost.delta(Double(t), lines(("A", 1)))) }
        files.keep(try lost.cart(6, lines(("A", 5)), syncedThrough: 5))
        files.outbox.removeLast(3)
        let fresh = files.recovered(cartClaim: 5)
        #expect(fresh.machine.state.lastOutboxSeq == 5)
        #expect(fresh.pendingSeqs.isEmpty)
    }

    /// A recorded payment after the deltas, the notifications gone: the deltas the claim
    /// acknowledges were paid with that basket, not Mealz's share in the new one.
    @Test func whatAPaymentPaidIsNoShareAgain() throws {
        var files = try paidBasket(("A", 1))
        files.notifications = []
        let fresh = files.recovered(cartClaim: 1)
        #expect(fresh.confirmed.isEmpty)
        #expect(fresh.machine.state.basket == 2)
    }

    /// The files' whole history is played again: the shopper's own units on a Mealz line stay
    /// the shopper's (the last notification's quantity is not Mealz's share).
    @Test func theShoppersOwnUnitsStayTheShoppers() throws {
        var lost = Transcript()
        var files = Files()
        files.keep(try lost.cart(0, [], syncedThrough: 0))
        files.keep(try lost.delta(1, lines(("A", 1))))
        files.keep(try lost.cart(2, lines(("A", 1)), syncedThrough: 1))
        files.keep(try lost.cart(3, lines(("A", 3)), syncedThrough: 1))
        let recovered = files.recovered(cartClaim: 1, cart: lines(("A", 3)))
        #expect(recovered.confirmed == lost.confirmed)
        #expect(recovered.confirmed == ["A": 1])
    }

    /// A unit paid, kept in the cart, then a pending batch on its line: the paid unit is no
    /// share again, and the batch still waits.
    @Test func aPaidUnitOnAPendingLineIsNoShareAgain() throws {
        var lost = Transcript()
        var files = Files()
        _ = lost.machine.setSelectedStore(externalId: "st", mode: .retailer, at: at(0))
        files.keep(try lost.cart(0, [], syncedThrough: 0))
        files.keep(try lost.delta(1, lines(("A", 1))))
        files.keep(try lost.cart(2, lines(("A", 1)), syncedThrough: 1))
        files.keep(try lost.machine.handlePayment(totalPrice: Money("1")!, productList: lines(("A", 1)), orderId: "o1", at: at(3)))
        files.keep(try lost.delta(4, lines(("A", 2))))
        files.keep(try lost.cart(5, lines(("A", 1)), syncedThrough: 1))
        let recovered = files.recovered(cartClaim: 1, cart: lines(("A", 1)))
        #expect(recovered.confirmed.isEmpty)
        #expect(recovered.pendingSeqs == [2])
        #expect(recovered.view == lost.view)
    }

    /// A cart whose claim is refused shows pending #2 applied: after the loss it is counted
    /// once in the basis, and it is no share until acknowledged.
    @Test func aShownBatchIsCountedOnceAfterALoss() throws {
        var lost = Transcript()
        var files = Files()
        files.keep(try lost.cart(0, [], syncedThrough: 0))
        files.keep(try lost.delta(1, lines(("A", 1))))
        files.keep(try lost.cart(2, lines(("A", 1)), syncedThrough: 1))
        files.keep(try lost.delta(3, lines(("B", 1))))
        files.keep(try lost.cart(4, lines(("A", 1), ("B", 1)), syncedThrough: 9))
        var recovered = files.recovered(cartClaim: 9, cart: lines(("A", 1), ("B", 1)))
        #expect(recovered.confirmed == ["A": 1])
        #expect(recovered.view == ["A": 1, "B": 1])
        #expect(try recovered.state(5, lines(("A", 1), ("B", 1))) == [])
    }

    /// The notifications file removed and the database lost: what a host without syncedThrough
    /// showed is unknown; the records made before its cart's last write are taken as processed
    /// (never applied twice), the later ones still wait.
    @Test func aGapInTheNotificationsNeverAppliesTwice() throws {
        var lost = Transcript()
        var files = Files()
        files.keep(try lost.cart(0, []))
        files.keep(try lost.delta(1, lines(("A", 1))))
        files.keep(try lost.cart(2, lines(("A", 1))))
        files.keep(try lost.cart(3, lines(("A", 4))))
        files.keep(try lost.delta(4, lines(("A", 1))))
        files.notifications = []
        var fresh = Transcript(syncId: "s2")
        _ = fresh.machine.recover(from: RecoveredRecords(outbox: files.outbox, cartWrittenThrough: 1, cartLines: lines(("A", 4))))
        #expect(fresh.machine.state.hostProgress(claim: nil, writtenThrough: 1) == 1)
        #expect(fresh.pendingSeqs == [2])
    }

    /// The payments file removed: a notification opening a basket with nothing where the basis
    /// held A:2 tells a payment (a store change keeps the basis): A:2 is no share again.
    @Test func anOpeningNotificationTellsAPaymentWhoseRecordIsGone() throws {
        var files = try paidBasket(("A", 2))
        files.payments = []
        let fresh = files.recovered(cartClaim: 1, cart: lines(("A", 2)))
        #expect(fresh.confirmed.isEmpty)
        #expect(fresh.machine.state.basket == 2)
    }

    /// The files of an acknowledging host in retailer mode: Mealz pushed `line`, the host applied
    /// and acknowledged it, and a payment of it was recorded (closing basket 1).
    func paidBasket(_ line: (String, Int)) throws -> Files {
        var lost = Transcript()
        var files = Files()
        _ = lost.machine.setSelectedStore(externalId: "st", mode: .retailer, at: at(0))
        files.keep(try lost.cart(0, [], syncedThrough: 0))
        files.keep(try lost.delta(1, lines(line)))
        files.keep(try lost.cart(2, lines(line), syncedThrough: 1))
        files.keep(try lost.machine.handlePayment(totalPrice: Money("1")!, productList: lines(line), orderId: "o1", at: at(3)))
        return files
    }

    /// An acknowledging host: what it had not acknowledged is pending again, so the WebView's
    /// state repeated pushes nothing, and the next record goes on after the files' last one.
    @Test func anAcknowledgingHostsUnacknowledgedDeltasArePendingAgain() throws {
        var lost = Transcript()
        var files = Files()
        files.keep(try lost.delta(0, lines(("A", 2))))
        files.keep(try lost.cart(1, lines(("A", 2), ("X", 4)), syncedThrough: 1))
        files.keep(try lost.delta(2, lines(("B", 1))))

        var recovered = files.recovered(cartClaim: 1)
        #expect(recovered.pendingSeqs == [2])
        #expect(recovered.confirmed == ["A": 2])
        #expect(recovered.view == ["A": 2, "B": 1])
        #expect(recovered.machine.state.hostProgress(claim: 1, writtenThrough: 2) == 1)
        // The WebView repeating what it showed pushes nothing: nothing is doubled.
        #expect(try recovered.state(3, lines(("A", 2), ("B", 1))) == [])
        // The host's cart acknowledging #2 settles it; the next delta is #3.
        _ = try recovered.cart(4, lines(("A", 2), ("B", 1), ("X", 4)), syncedThrough: 2)
        #expect(recovered.pendingSeqs.isEmpty && recovered.confirmed == ["A": 2, "B": 1])
        #expect(try recovered.delta(5, lines(("A", 1))) == [update(3, 5, lines(("A", 1)), syncId: "s2")])
    }

    /// Every record moved away: the new records are numbered after what the host claims, so an
    /// old claim never acknowledges a new record unapplied.
    @Test func withNoRecordLeftRecordsAreNumberedAfterTheHostsClaim() throws {
        var recovered = Files().recovered(cartClaim: 7)
        #expect(try recovered.delta(0, lines(("A", 1))).contains(update(8, 0, lines(("A", 1)), syncId: "s2")))
        // The cart's old claim acknowledges nothing new.
        _ = try recovered.cart(1, lines(("X", 1)), syncedThrough: 7)
        #expect(recovered.pendingSeqs == [8])
    }

    /// Records rotated away before the loss, a host without `syncedThrough`: the host goes on
    /// from the first record a file holds.
    @Test func recordsRotatedAwayAreSkippedByAHostWithoutAClaim() throws {
        var files = Files()
        var lost = Transcript()
        for t in 0..<6 { files.keep(try lost.delta(Double(t), lines(("A", 1)))) }
        files.outbox.removeFirst(4)
        let recovered = files.recovered(cartClaim: 0)
        #expect(recovered.machine.state.lastOutboxSeq == 6)
        #expect(recovered.machine.state.hostProgress(claim: nil, writtenThrough: 6) == 4)
    }

    /// A claim beyond the files acknowledges nothing (docs/spec.md §4 rule 4): what they hold is
    /// pending again, for a cart that acknowledges it within the outbox.
    @Test func aClaimBeyondTheFilesAcknowledgesNothing() throws {
        var files = Files()
        var lost = Transcript()
        files.keep(try lost.delta(0, lines(("A", 1))))
        files.keep(try lost.delta(1, lines(("B", 1))))
        let recovered = files.recovered(cartClaim: 50)
        #expect(recovered.machine.state.hostSyncedThrough == 0)
        #expect(recovered.pendingSeqs == [1, 2])
        #expect(recovered.machine.state.lastOutboxSeq == 2)
    }

    /// A recorded payment after the last notification closed its basket: the new basket starts
    /// empty, and the order is still answered as recorded.
    @Test func aRecordedPaymentClosesTheBasketAndStaysRecorded() throws {
        var lost = Transcript()
        var files = Files()
        _ = lost.machine.setSelectedStore(externalId: "store-42", mode: .retailer, at: at(0))
        files.keep(try lost.delta(0, lines(("A", 2))))
        files.keep(try lost.cart(1, lines(("A", 2)), syncedThrough: 1))
        files.keep(try lost.machine.handlePayment(totalPrice: money("9.00"), productList: lines(("A", 2)), orderId: "o-1", at: at(2)))
        #expect(files.payments.count == 1 && files.payments[0].status == .recorded)

        var recovered = files.recovered(cartClaim: 1)
        #expect(recovered.machine.state.basket == files.payments[0].basket + 1)
        #expect(recovered.view.isEmpty)
        _ = recovered.machine.setSelectedStore(externalId: "store-42", mode: .retailer, at: at(3))
        let retry = try recovered.machine.handlePayment(totalPrice: money("9.00"), productList: lines(("A", 2)), orderId: "o-1", at: at(4))
        #expect(retry.contains(.paymentAlreadyRecorded(orderId: "o-1", seq: 1)))
    }

    /// Retention keeps what the host has not processed: pending batches, and batches rolled back
    /// and never echoed since.
    @Test func retentionKeepsPendingAndUnechoedBatches() throws {
        var s = Transcript()
        _ = try s.delta(0, lines(("A", 1)))
        _ = try s.cart(1, lines(("A", 1)))
        _ = try s.delta(2, lines(("A", 1)))
        _ = s.tick(20)
        _ = try s.delta(21, lines(("B", 1)))
        let retention = s.machine.state.outboxRetention
        #expect(retention.mayRemove(1))
        #expect(!retention.mayRemove(2), "rolled back, never echoed: a late echo may still confirm it")
        #expect(!retention.mayRemove(3), "pending")
    }

    /// A cart with `syncedThrough` 0 is an acknowledging host's (0 is a claim): its unapplied
    /// batch is pending again, so the WebView repeating its state pushes nothing twice.
    @Test func aCartClaimingZeroIsAnAcknowledgingHosts() throws {
        var lost = Transcript()
        var files = Files()
        files.keep(try lost.delta(0, lines(("A", 2))))
        var recovered = files.recovered(cartClaim: 0)
        #expect(recovered.pendingSeqs == [1])
        #expect(recovered.view == ["A": 2])
        #expect(try recovered.state(1, lines(("A", 2))) == [])
    }
}
