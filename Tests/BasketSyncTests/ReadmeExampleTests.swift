import BasketSync
import Foundation
import Testing

// README-EXAMPLE-BEGIN
final class HostCart: RetailerBasketSynchronizer {
    func updateBasket(products: [RetailerProduct]) {
        // Signed deltas: +n adds n, -n removes n; clamp each line at 0.
        for product in products { print("apply \(product.id) \(product.quantity)") }
    }
}

func integrate() throws {
    let manager = BasketSynchronizationManager(state: SyncState(syncId: "cart-1"), clock: { Date() })
    manager.registerRetailerBasketSynchronizer(synchronizer: HostCart())

    // Mealz pushes deltas: HostCart.updateBasket receives batch #1 {sku-1: +2}.
    try manager.receive(.basketDelta([RetailerProduct(id: "sku-1", quantity: 2)]), source: "evt-42")

    // The host reports its whole cart, absolute, and the outbox seq it has processed.
    try manager.notifyRetailerBasketChanged(
        productLists: [RetailerProduct(id: "sku-1", quantity: 2), RetailerProduct(id: "sku-7", quantity: 1)],
        syncedThrough: 1)

    // Payments are recorded in retailer mode, with a store.
    manager.setSelectedStoreWithExternalId("store-42", mode: .retailer)
    guard let total = Money("42.50") else { return }
    try manager.handlePayment(
        totalPrice: total, productList: [RetailerProduct(id: "sku-1", quantity: 2)], orderId: "order-123"
    ) {
        print("order-123 paid")
    }
}
// README-EXAMPLE-END

@Suite struct ReadmeExampleTests {
    @Test func theReadmeExampleIsThisCompiledCode() throws {
        let testFile = URL(fileURLWithPath: #filePath)
        let root = testFile.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let source = try String(contentsOf: testFile, encoding: .utf8)

        let compiled = try #require(source.between("// README-EXAMPLE-BEGIN\n", "// README-EXAMPLE-END"))
        let documented = try #require(readme.between("```swift\nimport BasketSync\n\n", "```"))
        #expect(documented == compiled, "README.md's library example must be the code compiled here")
    }

    @Test func theReadmeExampleRuns() throws {
        try integrate()
    }
}

extension String {
    func between(_ start: String, _ end: String) -> String? {
        guard let from = range(of: start), let to = range(of: end, range: from.upperBound..<endIndex) else { return nil }
        return String(self[from.upperBound..<to.lowerBound])
    }
}
