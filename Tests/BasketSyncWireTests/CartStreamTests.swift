import BasketSync
@testable import BasketSyncWire
import Testing
import TestSupport

/// The one-pass cart reader against the tree decoder, on seeded carts: valid ones of every shape
/// a host writes, and the same carts cut, with a byte changed or inserted. The fast path either
/// gives up (nil) or reads exactly what the tree decoder reads; it never takes a cart the tree
/// decoder refuses. A failure prints its seed (BASKET_SYNC_SEED replays it).
@Suite struct CartStreamTests {
    static let rounds = Knobs.value("BASKET_SYNC_ROUNDS", default: 3_000)

    static func id(_ rng: inout SplitMix64) -> String {
        let pieces = ["sku", "-", "1", "42", "café", "cafe\u{301}", "é", "\u{85}", "\u{7F}", " ", "\"", "\\", "\n", "😀", "a", "Z", "_", "\u{0}"]
        let count = Int.random(in: 0...4, using: &rng)
        return (0..<count).map { _ in pieces[Int.random(in: 0..<pieces.count, using: &rng)] }.joined()
    }

    static func scalar(_ rng: inout SplitMix64) -> String {
        let choices = ["1", "-1", "0", "2.5", "1e3", "-0", "01", "true", "false", "null", "\"x\"", "\"\\u0041\"", "[]", "{}", "[1]", "{\"a\":1}", "1.", "\"\u{1}\""]
        return choices[Int.random(in: 0..<choices.count, using: &rng)]
    }

    static func quantity(_ rng: inout SplitMix64) -> String {
        let choices = ["0", "1", "7", "999999", "1000000", "1000001", "-3", "2.0", "1e2", "99999999999999999999", "\"3\"", "null", "-0", "007"]
        return Int.random(in: 0..<4, using: &rng) == 0 ? choices[Int.random(in: 0..<choices.count, using: &rng)] : String(Int.random(in: 0...50, using: &rng))
    }

    static func quoted(_ text: String) -> String {
        var writer = JSONWriter()
        writer.string(text)
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    static func cart(_ rng: inout SplitMix64, keys: CartKeys) -> [UInt8] {
        var lines: [String] = []
        for _ in 0..<Int.random(in: 0...6, using: &rng) {
            var fields: [String] = []
            if Int.random(in: 0..<12, using: &rng) > 0 { fields.append("\(quoted(keys.id)): \(quoted(id(&rng)))") }
            if Int.random(in: 0..<12, using: &rng) > 0 { fields.append("\(quoted(keys.quantity)): \(quantity(&rng))") }
            for _ in 0..<Int.random(in: 0...2, using: &rng) { fields.append("\(quoted(["label", "price", keys.id, "x"][Int.random(in: 0..<4, using: &rng)])): \(scalar(&rng))") }
            fields.shuffle(using: &rng)
            lines.append(Int.random(in: 0..<30, using: &rng) == 0 ? scalar(&rng) : "{" + fields.joined(separator: Bool.random(using: &rng) ? ", " : ",") + "}")
        }
        let array = "[" + lines.joined(separator: Bool.random(using: &rng) ? ",\n  " : ",") + "]"
        var text: String
        if Int.random(in: 0..<5, using: &rng) == 0 {
            text = array
        } else {
            var members = ["\(quoted(keys.products)): \(array)"]
            switch Int.random(in: 0..<5, using: &rng) {
            case 0: members.append("\(quoted(keys.syncedThrough)): \(Int.random(in: 0...99, using: &rng))")
            case 1: members.append("\(quoted(keys.syncedThrough)): \(["null", "-1", "1.5", "\"3\""][Int.random(in: 0..<4, using: &rng)])")
            case 2: members.append("\"host\": \(scalar(&rng))")
            default: break
            }
            if Int.random(in: 0..<15, using: &rng) == 0 { members.append(members[0]) }
            members.shuffle(using: &rng)
            text = "{" + members.joined(separator: ", ") + "}"
        }
        if Int.random(in: 0..<20, using: &rng) == 0 { text = "\u{FEFF}" + text }
        if Bool.random(using: &rng) { text = " \n" + text + "\n" }
        var bytes = Array(text.utf8)
        // Mutations: cut, a byte changed, a byte inserted.
        if !bytes.isEmpty, Int.random(in: 0..<4, using: &rng) == 0 {
            let position = Int.random(in: 0..<bytes.count, using: &rng)
            let noise: [UInt8] = [0x22, 0x5C, 0x2C, 0x7D, 0x5D, 0x7B, 0x5B, 0x3A, 0x30, 0x2D, 0x20, 0x00, 0xC3, 0xFF, 0x80, 0x0A]
            switch Int.random(in: 0..<3, using: &rng) {
            case 0: bytes.removeSubrange(position...)
            case 1: bytes[position] = noise[Int.random(in: 0..<noise.count, using: &rng)]
            default: bytes.insert(noise[Int.random(in: 0..<noise.count, using: &rng)], at: position)
            }
        }
        return bytes
    }

    @Test func theOnePassReaderReadsAsTheTreeDecoderOrGivesUp() {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        var fast = 0
        for round in 0..<Self.rounds {
            var keys = CartKeys()
            if Int.random(in: 0..<4, using: &rng) == 0 {
                keys.products = "lignes"
                keys.id = "sku"
                keys.quantity = "qté"
                keys.syncedThrough = "vu"
            }
            var limits = InputLimits()
            if Bool.random(using: &rng) { limits.maxIdBytes = 6 }
            let bytes = Self.cart(&rng, keys: keys)
            let tree = Result { () throws(DecodingFailure) in try CartDocument(bytes, keys: keys, limits: limits).cart }
            guard let streamed = CartStream.decode(bytes, keys: keys, limits: limits) else { continue }
            fast += 1
            switch tree {
            case let .success(cart):
                #expect(streamed == cart, "seed \(seed) round \(round): \(String(decoding: bytes, as: UTF8.self))")
            case let .failure(failure):
                Issue.record("seed \(seed) round \(round): the tree decoder refuses (\(failure.first.reason)) what the one-pass reader took: \(String(decoding: bytes, as: UTF8.self))")
            }
        }
        #expect(fast > Self.rounds / 20, "seed \(seed): the one-pass reader took only \(fast) of \(Self.rounds) carts")
    }

    @Test func aLargeCartTakesTheOnePath() {
        let text = "{\"products\": [" + (0..<10_000).map { "{\"id\": \"sku-\($0)\", \"quantity\": \($0 % 7), \"label\": \"Milk 1 L\", \"price\": 1.25}" }.joined(separator: ",\n") + "], \"syncedThrough\": 12}"
        let cart = CartStream.decode(Array(text.utf8), keys: CartKeys(), limits: InputLimits())
        #expect(cart?.products.count == 10_000)
        #expect(cart?.syncedThrough == 12)
        #expect(cart == (try? CartDocument(Array(text.utf8), keys: CartKeys(), limits: InputLimits()).cart))
    }
}

extension CartStreamTests {
    /// The host cart kept beside the state reads back as written, whatever its ids and quantities.
    @Test func theSavedHostCartReadsBackExactly() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        for _ in 0..<200 {
            var map: [ExactID: Int] = [:]
            for _ in 0..<Int.random(in: 0...50, using: &rng) {
                let quantity = [0, 1, -1, Int.max, Int.min, Int.random(in: -1_000_000...1_000_000, using: &rng)][Int.random(in: 0..<6, using: &rng)]
                map[ExactID(Self.id(&rng) + String(Int.random(in: 0...9, using: &rng)))] = quantity
            }
            #expect(try StateFormat.decodeQuantities(StateFormat.encodeQuantities(map)) == map, "seed \(seed)")
        }
        #expect(try StateFormat.decodeQuantities(Array("null".utf8)) == nil)
        #expect(try StateFormat.decodeQuantities(Array("{\"a\": 2}".utf8)) == ["a": 2], "as version 2 first wrote it")
        #expect(throws: JSONProblem.self) { try StateFormat.decodeQuantities([0x01, 0x05, 0x61]) }
    }
}
