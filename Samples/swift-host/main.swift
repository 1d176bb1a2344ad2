// A tiny Swift host that embeds BasketSync directly, with no agent and no files: its cart lives in
// memory, its own RetailerBasketSynchronizer applies Mealz's deltas, and it reports its cart back
// with notifyRetailerBasketChanged. Run: swift run swift-host-sample
import BasketSync
import Glibc
import Synchronization

/// The host's cart, in memory, keyed by `ExactID`: SKUs compare byte for byte (a `String` key
/// would merge `café` in NFC with `café` in NFD). Mealz's deltas arrive here: +n adds n, -n removes n, clamped at 0.
final class InMemoryCart: RetailerBasketSynchronizer {
    private let lines = Mutex<[ExactID: Int]>([:])

    func updateBasket(products: [RetailerProduct]) {
        lines.withLock { cart in RetailerProduct.apply(products, to: &cart) }
        print("host: applied \(products.map { "\($0.id) \($0.quantity > 0 ? "+" : "")\($0.quantity)" }.joined(separator: ", "))")
    }

    /// The shopper edits the cart in the host's own UI.
    func set(_ id: ExactID, _ quantity: Int) { lines.withLock { $0[id] = quantity == 0 ? nil : quantity } }

    /// The whole cart, absolute, as notifyRetailerBasketChanged wants it.
    var products: [RetailerProduct] {
        lines.withLock { cart in cart.keys.sorted().map { RetailerProduct(id: $0.string, quantity: cart[$0]!) } }
    }
}

func describe(_ lines: [ExactID: Int]) -> String {
    lines.keys.sorted().map { "\($0)=\(lines[$0]!)" }.joined(separator: " ")
}

let cart = InMemoryCart()
let manager = BasketSynchronizationManager(state: SyncState(syncId: "swift-host"), clock: { Date() })
manager.registerRetailerBasketSynchronizer(synchronizer: cart)
manager.setSelectedStoreWithExternalId("store-42", mode: .retailer)

// The shopper's own product, then two recipes from Mealz.
cart.set("bread", 1)
try manager.notifyRetailerBasketChanged(productLists: cart.products)
try manager.receive(.basketDelta([RetailerProduct(id: "pasta", quantity: 2), RetailerProduct(id: "tomato", quantity: 3)]), source: "recipe-1")
try manager.receive(.basketDelta([RetailerProduct(id: "pasta", quantity: 1)]), source: "recipe-2")
// The host applied both batches (seq 1 and 2) as they came: it says so.
try manager.notifyRetailerBasketChanged(productLists: cart.products, syncedThrough: 2)

// The shopper removes a tomato in the host cart; Mealz follows it downward.
cart.set("tomato", 2)
try manager.notifyRetailerBasketChanged(productLists: cart.products, syncedThrough: 2)
// The WebView shows its whole basket without recipe 2: the difference is pushed as deltas.
try manager.receive(.basketState([RetailerProduct(id: "pasta", quantity: 2), RetailerProduct(id: "tomato", quantity: 2)]), source: "webview")
try manager.notifyRetailerBasketChanged(productLists: cart.products, syncedThrough: 3)

let view = manager.mealzView
let mealzLines = Dictionary(uniqueKeysWithValues: cart.products.filter { view[ExactID($0.id)] != nil }.map { (ExactID($0.id), $0.quantity) })
print("host cart:    \(describe(Dictionary(uniqueKeysWithValues: cart.products.map { (ExactID($0.id), $0.quantity) })))")
print("Mealz's view: \(describe(view))")
let converged = mealzLines == view && manager.state.pending.isEmpty
print(converged ? "converged" : "NOT converged")

guard let total = Money("23.40") else { fatalError("not an amount") }
try manager.handlePayment(totalPrice: total, productList: cart.products, orderId: "order-7") {
    print("paid: order-7; the next cart starts Mealz basket \(manager.state.basket)")
}
if !converged { exit(1) }
