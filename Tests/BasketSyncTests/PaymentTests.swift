import BasketSync
import Testing

/// Payments (docs/spec.md §4 rule 7), the store and mode (rule 8), and exact money.
@Suite struct PaymentTests {
    /// A retailer-mode transcript with a store, and A:2 confirmed in Mealz's basket.
    func retailerWithBasket() throws -> Transcript {
        var s = Transcript()
        #expect(s.machine.setSelectedStore(externalId: "store-42", mode: .retailer, at: at(0))
            == [.storeChanged(storeId: "store-42", mode: .retailer, basket: 1)])
        _ = try s.cart(0, [], syncedThrough: 0)
        _ = try s.delta(1, lines(("A", 2)))
        _ = try s.cart(2, lines(("A", 3), ("X", 1)), syncedThrough: 1)
        return s
    }

    func payment(
        _ seq: UInt64, _ type: PaymentRecord.PaymentType, _ t: Double, reason: PaymentRecord.SkipReason? = nil,
        storeId: String? = "store-42", orderId: String? = nil, total: String = "42.50",
        products: [RetailerProduct], mealz: [RetailerProduct] = [], basket: UInt64 = 1
    ) -> SyncEffect {
        .payment(PaymentRecord(
            seq: seq, type: type, at: at(t), status: reason == nil ? .recorded : .skipped, reason: reason,
            storeId: storeId, orderId: orderId, totalPrice: money(total), products: products,
            mealzProducts: mealz, basket: basket))
    }

    @Test func paymentStartedRecordsTheMealzPartOfTheProducts() throws {
        var s = try retailerWithBasket()
        let bought = lines(("A", 3), ("X", 1))
        #expect(s.machine.paymentStarted(totalPrice: money("42.50"), productList: bought, orderId: nil, at: at(3))
            == [payment(1, .paymentStarted, 3, products: bought, mealz: lines(("A", 2)))])
    }

    @Test(arguments: [
        (SyncMode.standalone, "store-42" as String?, PaymentRecord.SkipReason.notRetailerMode),
        (SyncMode.retailer, nil, PaymentRecord.SkipReason.noStore),
    ])
    func paymentStartedIsBestEffort(mode: SyncMode, store: String?, reason: PaymentRecord.SkipReason) throws {
        var s = Transcript()
        _ = s.machine.setSelectedStore(externalId: store, mode: mode, at: at(0))
        let bought = lines(("A", 1))
        #expect(s.machine.paymentStarted(totalPrice: money("1"), productList: bought, orderId: "o-1", at: at(1))
            == [payment(1, .paymentStarted, 1, reason: reason, storeId: store, orderId: "o-1", total: "1", products: bought)])
        #expect(s.machine.state.counters.paymentsSkipped == 1)
    }

    @Test func paymentStartedWithoutAMealzProductOrWithBadProductsIsSkipped() throws {
        var s = try retailerWithBasket()
        #expect(s.machine.paymentStarted(totalPrice: money("3"), productList: lines(("X", 1)), orderId: nil, at: at(3))
            == [payment(1, .paymentStarted, 3, reason: .noMealzProduct, total: "3", products: lines(("X", 1)))])
        #expect(s.machine.paymentStarted(totalPrice: money("3"), productList: lines(("", 1)), orderId: nil, at: at(4))
            == [payment(2, .paymentStarted, 4, reason: .invalidProducts, total: "3", products: lines(("", 1)))])
        #expect(s.machine.paymentStarted(totalPrice: money("3"), productList: nil, orderId: nil, at: at(5))
            == [payment(3, .paymentStarted, 5, reason: .invalidProducts, total: "3", products: [])])
    }

    @Test func handlePaymentRecordsOncePerOrderAndClosesTheBasket() throws {
        var s = try retailerWithBasket()
        let bought = lines(("A", 3), ("X", 1))
        #expect(try s.machine.handlePayment(totalPrice: money("42.50"), productList: bought, orderId: "order-123", at: at(3))
            == [payment(1, .handlePayment, 3, orderId: "order-123", products: bought, mealz: lines(("A", 2))),
                .basketClosed(newBasket: 2), notify(3, 3, [], syncedThrough: 1, basket: 2)])
        #expect(s.view == [:])
        #expect(s.machine.state.basket == 2)
        // The same order again: not recorded again, whatever the amount says.
        #expect(try s.machine.handlePayment(totalPrice: money("99"), productList: bought, orderId: "order-123", at: at(4))
            == [.paymentAlreadyRecorded(orderId: "order-123", seq: 1)])
        #expect(s.machine.state.lastPaymentSeq == 1)
        #expect(s.machine.state.counters.duplicatePayments == 1)
        // The new basket was told at once; the next cart, where A is no longer Mealz's, tells
        // nothing new.
        #expect(try s.cart(5, lines(("A", 3), ("X", 1)), syncedThrough: 1) == [])
    }

    @Test func handlePaymentWithoutAMealzProductIsRecordedAsSkipped() throws {
        var s = try retailerWithBasket()
        let bought = lines(("X", 1))
        #expect(try s.machine.handlePayment(totalPrice: money("5.00"), productList: bought, orderId: "o-2", at: at(3))
            == [payment(1, .handlePayment, 3, reason: .noMealzProduct, orderId: "o-2", total: "5.00", products: bought)])
        #expect(s.machine.state.basket == 1, "a skipped payment bought nothing of Mealz's: the basket stays open")
        #expect(s.confirmed == ["A": 2])
    }

    @Test func handlePaymentFailsClearlyWithoutModeOrStore() throws {
        var s = Transcript()
        #expect(throws: PaymentError.notRetailerMode) {
            try s.machine.handlePayment(totalPrice: money("1"), productList: [], orderId: "o", at: at(0))
        }
        _ = s.machine.setSelectedStore(externalId: nil, mode: .retailer, at: at(0))
        #expect(throws: PaymentError.noStore) {
            try s.machine.handlePayment(totalPrice: money("1"), productList: [], orderId: "o", at: at(0))
        }
        _ = s.machine.setSelectedStore(externalId: "st", mode: nil, at: at(0))
        #expect(throws: PaymentError.emptyOrderId) {
            try s.machine.handlePayment(totalPrice: money("1"), productList: [], orderId: "", at: at(0))
        }
        #expect(throws: PaymentError.invalidProducts(.negativeQuantity(id: "A", quantity: -1))) {
            try s.machine.handlePayment(totalPrice: money("1"), productList: lines(("A", -1)), orderId: "o", at: at(0))
        }
        #expect(s.machine.state.lastPaymentSeq == 0)
        #expect(s.machine.state.recordedOrders.isEmpty)
    }

    @Test func aStoreChangeDoesNotDoubleQuantities() throws {
        var s = try retailerWithBasket()
        _ = try s.delta(3, lines(("B", 1)))
        #expect(s.machine.setSelectedStore(externalId: "store-7", mode: nil, at: at(4))
            == [.storeChanged(storeId: "store-7", mode: .retailer, basket: 2),
                notify(3, 4, lines(("A", 3), ("B", 1)), syncedThrough: 1, basket: 2)])
        // The WebView of the new store shows the same basket: nothing is pushed again.
        #expect(s.view == ["A": 3, "B": 1])
        #expect(try s.state(5, lines(("A", 3), ("B", 1))) == [])
        #expect(try s.cart(6, lines(("A", 3), ("B", 1), ("X", 1)), syncedThrough: 2)
            == [.settled(seq: 2), notify(4, 6, lines(("A", 3), ("B", 1)), syncedThrough: 2, basket: 2)])
        #expect(s.confirmed == ["A": 2, "B": 1])
        #expect(s.view == ["A": 3, "B": 1])
        // Setting the same store and mode again changes nothing.
        #expect(s.machine.setSelectedStore(externalId: "store-7", mode: .retailer, at: at(7)) == [])
    }

    @Test(arguments: ["0.10", "42.50", "42", "0", "007.5", "123456789012345678901234567.891"])
    func moneyKeepsItsDigits(text: String) throws {
        let value = try #require(Money(text))
        let expected = text.hasPrefix("00") ? String(text.drop { $0 == "0" }) : text
        #expect(value.description == expected)
        let data = try JSONEncoder().encode(value)
        #expect(String(decoding: data, as: UTF8.self) == "\"\(expected)\"")
        #expect(try JSONDecoder().decode(Money.self, from: data) == value)
    }

    @Test(arguments: ["42,50", "-1", "1e3", ".5", "5.", "+3", " 1", "", "1.2.3", "0x10", "١٢", "1234567890123456789012345678901"])
    func moneyRefusesWhatIsNotAPlainAmount(text: String) {
        #expect(Money(text) == nil)
    }

    /// A refusal says which: the form of an amount with too many digits (counted without the
    /// point), or not the form of an amount at all.
    @Test(arguments: [("1234567890123456789012345678901", Money.Problem.tooManyDigits(31)),
                      ("123456789012345678901234567890.5", .tooManyDigits(31)),
                      ("12345678901234567890123456789.0", nil),
                      ("1234567890123456789012345678901,5", .notAnAmount),
                      ("-1234567890123456789012345678901", .notAnAmount),
                      ("5.", .notAnAmount), ("", .notAnAmount)])
    func moneySaysWhyItRefuses(text: String, problem: Money.Problem?) {
        switch Money.parse(text) {
        case let .success(money): #expect(problem == nil && money == Money(text), "\(text)")
        case let .failure(refused): #expect(refused == problem, "\(text)")
        }
    }

    @Test func moneyIsExact() throws {
        let tenCents = try #require(Money("0.10"))
        let twenty = try #require(Money("0.20"))
        #expect(tenCents.amount + twenty.amount == Decimal(string: "0.3"))
        #expect(Money("42.5") == Money("42.50"))
    }

    /// docs/spec.md §4 rule 7: a WebView state based on a basket a payment closed is stale:
    /// ignored, counted and reported, never diffed (it would push the paid basket again). A state
    /// for the current basket, or one that says none, is diffed.
    @Test func aStateForAClosedBasketIsStale() throws {
        var s = try retailerWithBasket()
        _ = try s.machine.handlePayment(totalPrice: money("9"), productList: lines(("A", 3)), orderId: "o", at: at(3))
        #expect(try s.machine.receive(.basketState(lines(("A", 2)), basket: 1), source: "late", at: at(4))
            == [.staleState(basket: 1, current: 2)])
        #expect(s.machine.state.counters.staleStates == 1)
        #expect(s.pendingSeqs.isEmpty)
        #expect(try s.machine.receive(.basketState(lines(("A", 1)), basket: 2), source: "now", at: at(5))
            == [update(2, 5, lines(("A", 1)), source: "now")])
    }
}
