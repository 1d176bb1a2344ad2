@testable import BasketSyncAgent
import BasketSyncWire
import Testing

/// What a cart's reading depends on besides its bytes (the keys, the limits, the cart's path,
/// whether links are followed) is named field by field: a field added to the settings and left
/// out would let a cart read under the old settings pass as read under the new.
@Suite struct ReadingHashTests {
    @Test func everyFieldOfTheKeysAndLimitsIsNamed() {
        #expect(Mirror(reflecting: CartKeys()).children.count == CartReader.readingFields.keys)
        #expect(Mirror(reflecting: InputLimits()).children.count == CartReader.readingFields.limits)
    }

    /// Each setting alone changes the hash; the same settings give the same hash.
    @Test func eachSettingChangesTheHash() {
        let base = AgentConfiguration()
        var changes: [AgentConfiguration] = []
        for change in 0..<9 {
            var configuration = base
            switch change {
            case 0: configuration.keys.products = "lines"
            case 1: configuration.keys.id = "sku"
            case 2: configuration.keys.quantity = "qty"
            case 3: configuration.keys.syncedThrough = "seen"
            case 4: configuration.limits.maxFileBytes += 1
            case 5: configuration.limits.maxQuantity += 1
            case 6: configuration.limits.maxIdBytes += 1
            case 7: configuration.cart = "host/cart.json"
            default: configuration.followSymlinks.toggle()
            }
            changes.append(configuration)
        }
        let hashes = Set(changes.map(CartReader.readingHash))
        #expect(hashes.count == changes.count && !hashes.contains(CartReader.readingHash(base)))
        #expect(CartReader.readingHash(base) == CartReader.readingHash(AgentConfiguration()))
        // Two keys whose texts run together differently are told apart.
        var first = base, second = base
        (first.keys.products, first.keys.id) = ("ab", "c")
        (second.keys.products, second.keys.id) = ("a", "bc")
        #expect(CartReader.readingHash(first) != CartReader.readingHash(second))
    }
}
