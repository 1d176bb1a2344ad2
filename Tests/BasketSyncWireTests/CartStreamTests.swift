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

    /// The limit bounds what an id holds: a cart is refused when the lines of one id (compared
    /// byte for byte: "café" and "cafe\u{301}" are two ids) add up past `maxQuantity`, by both
    /// readers, and taken when every id is within it. The reference sums as the rule says.
    @Test func anIdsLinesAddingUpPastTheLimitAreRefusedByBothReaders() {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        let ids = ["A", "B", "café", "cafe\u{301}"]
        for round in 0..<Self.rounds {
            var limits = InputLimits()
            limits.maxQuantity = Int.random(in: 1...12, using: &rng)
            let lines = (0..<Int.random(in: 0...7, using: &rng)).map { _ in
                (ids[Int.random(in: 0..<ids.count, using: &rng)], Int.random(in: 0...limits.maxQuantity, using: &rng))
            }
            var sums: [[UInt8]: Int] = [:]
            for (id, quantity) in lines { sums[Array(id.utf8), default: 0] += quantity }
            let within = sums.values.allSatisfy { $0 <= limits.maxQuantity }
            let text = "{\"products\": [" + lines.map { "{\"id\": \(Self.quoted($0.0)), \"quantity\": \($0.1)}" }.joined(separator: ", ") + "]}"
            let bytes = Array(text.utf8)
            let context = "seed \(seed) round \(round) (limit \(limits.maxQuantity)): \(text)"
            switch Result(catching: { () throws(DecodingFailure) in try CartDocument(bytes, keys: CartKeys(), limits: limits).cart }) {
            case let .success(cart):
                #expect(within, "taken past the limit: \(context)")
                #expect(cart.products.count == lines.count, "\(context)")
            case let .failure(failure):
                #expect(!within, "refused within the limit (\(failure.first.reason)): \(context)")
                #expect(failure.first.reason.contains("adds up to"), "\(failure.first.reason): \(context)")
            }
            if let streamed = CartStream.decode(bytes, keys: CartKeys(), limits: limits) {
                #expect(within && streamed.products.count == lines.count, "the one-pass reader: \(context)")
            }
        }
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

/// Reading a cart by the version before (its lines matched by their bytes) against reading it
/// whole: seeded versions of a cart, each made from the one before by a few edits a host makes
/// (a quantity changed, a line added, removed, moved or written twice, the spacing between lines,
/// `syncedThrough`, another field) and sometimes a broken byte or other keys or limits. Each
/// version reads exactly as a whole read does (or both give up), and the lines said removed and
/// added turn the version before's lines into this version's, as a multiset.
@Suite struct CartStreamByChangesTests {
    static let rounds = Knobs.value("BASKET_SYNC_ROUNDS", default: 3_000) / 10

    struct Version {
        var lines: [String]
        var separators: [String]
        var syncedThrough: String?
        var syncedFirst: Bool
    }

    static var otherKeys: CartKeys {
        var keys = CartKeys()
        (keys.products, keys.id, keys.quantity, keys.syncedThrough) = ("lignes", "sku", "qté", "vu")
        return keys
    }

    static func line(_ rng: inout SplitMix64, keys: CartKeys) -> String {
        let ids = ["sku-1", "sku-2", "A", "café", "cafe\u{301}", "é-ü", "😀", "x", "Z9", "sku-1 "]
        let id = CartStreamTests.quoted(ids[Int.random(in: 0..<ids.count, using: &rng)] + String(Int.random(in: 0...30, using: &rng)))
        var fields = ["\(CartStreamTests.quoted(keys.id)): \(id)", "\(CartStreamTests.quoted(keys.quantity)): \(Int.random(in: 0...5, using: &rng) == 0 ? 0 : Int.random(in: 1...40, using: &rng))"]
        if Int.random(in: 0..<3, using: &rng) == 0 {
            // Mostly what a host writes; now and then what the one-pass reader leaves to the tree decoder.
            let label = Int.random(in: 0..<400, using: &rng) == 0 ? CartStreamTests.scalar(&rng) : ["\"Milk 1 L\"", "1.25", "true", "null"][Int.random(in: 0..<4, using: &rng)]
            fields.append("\"label\": \(label)")
        }
        fields.shuffle(using: &rng)
        return "{" + fields.joined(separator: Bool.random(using: &rng) ? ", " : ",") + "}"
    }

    static func separator(_ rng: inout SplitMix64) -> String { [",", ", ", ",\n  ", " ,"][Int.random(in: 0..<4, using: &rng)] }

    static func render(_ version: Version, keys: CartKeys) -> [UInt8] {
        var array = "["
        for (index, line) in version.lines.enumerated() { array += (index == 0 ? "" : version.separators[index]) + line }
        array += "]"
        var members = ["\(CartStreamTests.quoted(keys.products)): \(array)"]
        if let synced = version.syncedThrough {
            let member = "\(CartStreamTests.quoted(keys.syncedThrough)): \(synced)"
            if version.syncedFirst { members.insert(member, at: 0) } else { members.append(member) }
        }
        return Array(("{" + members.joined(separator: ", ") + "}").utf8)
    }

    static func edit(_ version: inout Version, _ rng: inout SplitMix64, keys: CartKeys) {
        for _ in 0..<Int.random(in: 1...4, using: &rng) {
            let count = version.lines.count
            let at = Int.random(in: 0...max(0, count - 1), using: &rng)
            switch Int.random(in: 0..<9, using: &rng) {
            case 0 where count > 0: version.lines[at] = line(&rng, keys: keys)
            case 1:
                let position = Int.random(in: 0...count, using: &rng)
                version.lines.insert(line(&rng, keys: keys), at: position)
                version.separators.insert(separator(&rng), at: position)
            case 2 where count > 0:
                let run = min(count - at, Int.random(in: 1...12, using: &rng))
                version.lines.removeSubrange(at..<at + run)
                version.separators.removeSubrange(at..<at + run)
            case 3 where count > 1:
                let moved = version.lines.remove(at: at)
                version.lines.insert(moved, at: Int.random(in: 0..<count, using: &rng))
            case 4 where count > 0:
                version.lines.insert(version.lines[at], at: Int.random(in: 0...count, using: &rng))
                version.separators.insert(separator(&rng), at: 0)
            case 5 where count > 0: version.separators[at] = separator(&rng)
            case 6: version.syncedThrough = [nil, "null", String(Int.random(in: 0...99, using: &rng)), String(Int.random(in: 0...99, using: &rng)), "-1"][Int.random(in: 0..<5, using: &rng)]
            case 7: version.syncedFirst.toggle()
            default: break
            }
        }
    }

    @Test func aVersionReadByTheOneBeforeReadsAsAWholeRead() {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        var kept: CartStream.CartLayout?
        var keys = CartKeys()
        var limits = InputLimits()
        var version = Version(lines: [], separators: [], syncedThrough: "1", syncedFirst: false)
        for _ in 0..<Int.random(in: 50...200, using: &rng) {
            version.lines.append(Self.line(&rng, keys: keys))
            version.separators.append(Self.separator(&rng))
        }
        var byChanges = 0
        for round in 0..<Self.rounds {
            // Other keys now and then; a tighter limit for one version.
            if Int.random(in: 0..<40, using: &rng) == 0 {
                keys = keys == CartKeys() ? Self.otherKeys : CartKeys()
                version.lines = version.lines.map { _ in Self.line(&rng, keys: keys) }
            }
            limits.maxIdBytes = Int.random(in: 0..<40, using: &rng) == 0 ? 6 : InputLimits().maxIdBytes
            Self.edit(&version, &rng, keys: keys)
            var bytes = Self.render(version, keys: keys)
            if Int.random(in: 0..<15, using: &rng) == 0 {
                bytes[Int.random(in: 0..<bytes.count, using: &rng)] = [0x22, 0x5C, 0x2C, 0x7D, 0x00, 0xFF][Int.random(in: 0..<6, using: &rng)]
            }
            let whole = CartStream.decode(bytes, keys: keys, limits: limits)
            let read = CartStream.decode(bytes, keys: keys, limits: limits, after: kept)
            let text = String(decoding: bytes, as: UTF8.self)
            #expect(read?.cart == whole, "seed \(seed) round \(round): \(text)")
            guard let read else { continue }
            if let change = read.change, let before = kept {
                byChanges += 1
                var lines: [RetailerProduct: Int] = [:]
                for line in before.lines { lines[line, default: 0] += 1 }
                for line in change.removed { lines[line, default: 0] -= 1 }
                for line in change.added { lines[line, default: 0] += 1 }
                var expected: [RetailerProduct: Int] = [:]
                for line in read.cart.products { expected[line, default: 0] += 1 }
                #expect(lines.filter { $0.value != 0 } == expected, "seed \(seed) round \(round): the changed lines do not make this version's lines: \(text)")
            }
            kept = read.layout
        }
        // The by-changes path must carry most versions, not a lucky few: seeds give 149–243 of 300
        // here (corrupted bytes, key switches and tight limits send the rest to a whole read), so
        // the bound is a third, not a half that seed 3922527176 missed by one.
        #expect(byChanges > Self.rounds / 3, "seed \(seed): only \(byChanges) of \(Self.rounds) versions were read by the one before")
    }
}
