@testable import BasketSyncWire
import BasketSync
import Foundation
import Testing
import TestSupport

/// Every format's encoder against its decoder, on seeded random values: what is written reads back
/// equal. `BASKET_SYNC_SEED` replays a run; a failure prints its seed.
@Suite struct RoundTripTests {
    static let rounds = Knobs.value("BASKET_SYNC_ROUND_TRIPS", default: 500)

    /// Ids that stress the writer: quotes, backslashes, controls a file may not hold as such,
    /// non-ASCII, U+2028/U+2029, canonical-equivalent pairs (NFC and NFD, `K` and the Kelvin sign: two
    /// ids each).
    static let idPieces = ["sku", "-", "\"", "\\", "/", "é", "e\u{301}", "😀", "\u{2028}", "\u{2029}", "ü", "u\u{308}", "K", "\u{212A}", " ", "{", "0"]

    static func id(_ rng: inout SplitMix64) -> String {
        (0..<Int.random(in: 1...4, using: &rng)).map { _ in idPieces.randomElement(using: &rng)! }.joined()
    }

    static func lines(_ rng: inout SplitMix64, signed: Bool) -> [RetailerProduct] {
        (0..<Int.random(in: 0...5, using: &rng)).map { _ in
            RetailerProduct(id: id(&rng), quantity: Int.random(in: (signed ? -1_000 : 0)...1_000, using: &rng))
        }
    }

    static func instant(_ rng: inout SplitMix64) -> Date {
        Date(timeIntervalSince1970: Double(Int64.random(in: 0...4_102_444_800_000, using: &rng)) / 1000)
    }

    @Test func carts() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        for _ in 0..<Self.rounds {
            var keys = CartKeys()
            if Bool.random(using: &rng) { (keys.products, keys.id, keys.quantity, keys.syncedThrough) = ("items", "sku", "qty", "progress") }
            let cart = HostCart(products: Self.lines(&rng, signed: false), syncedThrough: Bool.random(using: &rng) ? UInt64.random(in: 0...1_000, using: &rng) : nil)
            let bytes = CartFormat.encode(cart, keys: keys)
            #expect(try CartFormat.decode(bytes, keys: keys, limits: InputLimits()) == cart, "seed \(seed): \(String(decoding: bytes, as: UTF8.self))")
        }
    }

    /// `apply`'s edits of a cart document land exactly where the host rule says.
    @Test func cartDocumentEditsFollowTheHostRule() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        for _ in 0..<Self.rounds {
            let ids = (0..<3).map { _ in Self.id(&rng) }
            let original = (0..<Int.random(in: 0...5, using: &rng)).map { _ in RetailerProduct(id: ids.randomElement(using: &rng)!, quantity: Int.random(in: 0...5, using: &rng)) }
            let bare = Bool.random(using: &rng)
            let bytes = bare ? Array("[\(original.map { "{\"id\":\(quoted($0.id)),\"quantity\":\($0.quantity),\"label\":\"kept\"}" }.joined(separator: ","))]".utf8)
                : CartFormat.encode(HostCart(products: original, syncedThrough: nil), keys: CartKeys())
            var document = try CartDocument(bytes, keys: CartKeys(), limits: InputLimits())
            // The reference keys by bytes: a `String` key would merge canonical equivalents.
            var expected: [ExactID: Int] = [:]
            for line in original { expected[ExactID(line.id), default: 0] += line.quantity }
            expected = expected.filter { $0.value > 0 }
            let deltas = (0..<Int.random(in: 1...6, using: &rng)).map { _ in RetailerProduct(id: ids.randomElement(using: &rng)!, quantity: Int.random(in: -4...4, using: &rng)) }
            for delta in deltas { document.apply(delta) }
            RetailerProduct.apply(deltas, to: &expected)
            document.setSyncedThrough(9)
            let written = document.encoded()
            let back = try CartFormat.decode(written, keys: CartKeys(), limits: InputLimits())
            var actual: [ExactID: Int] = [:]
            for line in back.products { actual[ExactID(line.id), default: 0] += line.quantity }
            #expect(actual.filter { $0.value > 0 } == expected, "seed \(seed): \(String(decoding: written, as: UTF8.self))")
            // The lines themselves, by the rule's words: an id on several lines adds up; a delta
            // moves the sum (clamped at 0) and lands on them as little as it can — an increase on
            // the first line, a decrease from the last line back; a line brought to 0 goes, every
            // other line stays as it is; a new id gets a new line at the end.
            var model: [(id: ExactID, quantity: Int, original: Bool)?] = original.map { (ExactID($0.id), $0.quantity, true) }
            for delta in deltas {
                let id = ExactID(delta.id)
                let positions = model.indices.filter { model[$0]?.id == id }
                let total = positions.reduce(0) { $0 + model[$1]!.quantity }
                let wanted = max(0, total + delta.quantity)
                if positions.isEmpty {
                    if wanted > 0 { model.append((id, wanted, false)) }
                } else if wanted > total {
                    model[positions[0]]!.quantity += wanted - total
                } else {
                    var left = total - wanted
                    for position in positions.reversed() where left > 0 {
                        let taken = min(model[position]!.quantity, left)
                        if taken == 0 { continue }
                        model[position]!.quantity -= taken
                        left -= taken
                        if model[position]!.quantity == 0 { model[position] = nil }
                    }
                }
            }
            let kept = model.compactMap { $0 }
            #expect(back.products.map { "\(ExactID($0.id)):\($0.quantity)" } == kept.map { "\($0.id):\($0.quantity)" },
                    "seed \(seed): lines as the rule places them: \(String(decoding: written, as: UTF8.self))")
            #expect(back.syncedThrough == 9)
            if bare {
                let labels = String(decoding: written, as: UTF8.self).components(separatedBy: "\"label\":\"kept\"").count - 1
                #expect(labels == kept.filter(\.original).count, "seed \(seed): every line kept keeps its other fields")
            }
        }
    }

    private func quoted(_ text: String) -> String {
        var writer = JSONWriter()
        writer.string(text)
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    @Test func events() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        for _ in 0..<Self.rounds {
            let event: MealzEvent
            switch Int.random(in: 0..<4, using: &rng) {
            case 0: event = .basketDelta(Self.lines(&rng, signed: true))
            case 1: event = .basketState(Self.lines(&rng, signed: false), basket: Bool.random(using: &rng) ? UInt64.random(in: 1...SyncState.largestSeq, using: &rng) : nil)
            case 2: event = .basketTransfer(Self.lines(&rng, signed: false), transferId: Self.id(&rng))
            default: event = .redirectToCart
            }
            let inbox = InboxEvent(id: Self.id(&rng), event: event)
            let bytes = EventFormat.encode(inbox)
            #expect(try EventFormat.decode(bytes, limits: InputLimits()) == inbox, "seed \(seed): \(String(decoding: bytes, as: UTF8.self))")
        }
    }

    @Test func records() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        for _ in 0..<Self.rounds {
            // Up to the largest seq, the bound itself too (a number past it is no record's).
            let seq = Int.random(in: 0..<8, using: &rng) == 0 ? SyncState.largestSeq : UInt64.random(in: 1...SyncState.largestSeq, using: &rng)
            let isUpdate = Bool.random(using: &rng)
            let outbox = OutboxRecord(
                seq: seq, id: Self.id(&rng), type: isUpdate ? .updateBasket : .redirectToCart, at: Self.instant(&rng),
                source: Bool.random(using: &rng) ? Self.id(&rng) : nil, products: isUpdate ? Self.lines(&rng, signed: true) : [],
                transferId: Bool.random(using: &rng) ? Self.id(&rng) : nil)
            let outboxLine = RecordFormat.line(outbox)
            #expect(try RecordFormat.outboxRecord(outboxLine) == outbox, "seed \(seed)")
            #expect(RecordFormat.seq(ofLine: outboxLine) == seq)

            let notification = BasketNotification(
                seq: seq, at: Self.instant(&rng), products: Self.lines(&rng, signed: false),
                syncedThrough: Bool.random(using: &rng) ? UInt64.random(in: 0...seq, using: &rng) : nil,
                basket: UInt64.random(in: 1...SyncState.largestSeq, using: &rng))
            let notificationLine = RecordFormat.line(notification)
            #expect(try RecordFormat.notification(notificationLine) == notification, "seed \(seed)")
            #expect(RecordFormat.seq(ofLine: notificationLine) == seq)

            let skipped = Bool.random(using: &rng)
            let payment = PaymentRecord(
                seq: seq, type: Bool.random(using: &rng) ? .paymentStarted : .handlePayment, at: Self.instant(&rng),
                status: skipped ? .skipped : .recorded, reason: skipped ? .noMealzProduct : nil,
                storeId: Bool.random(using: &rng) ? Self.id(&rng) : nil, orderId: Bool.random(using: &rng) ? Self.id(&rng) : nil,
                totalPrice: Money("\(Int.random(in: 0...99_999, using: &rng)).\(Int.random(in: 10...99, using: &rng))")!,
                products: Self.lines(&rng, signed: false), mealzProducts: Self.lines(&rng, signed: false), basket: UInt64.random(in: 1...99, using: &rng))
            let paymentLine = RecordFormat.line(payment)
            let back = try RecordFormat.payment(paymentLine)
            #expect(back == payment && back.totalPrice.text == payment.totalPrice.text, "seed \(seed)")
            for line in [outboxLine, notificationLine, paymentLine] {
                #expect(line.last == 0x0A && line.filter { $0 == 0x0A }.count == 1, "seed \(seed): one record, one line")
            }
        }
    }

    @Test func timestampsAgreeWithFoundation() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        for _ in 0..<Self.rounds {
            let date = Self.instant(&rng)
            let text = Timestamp.text(date)
            #expect(text == formatter.string(from: date), "seed \(seed): \(date.timeIntervalSince1970)")
            #expect(Timestamp.date(text) == date, "seed \(seed): \(text)")
        }
        #expect(Timestamp.text(Date(timeIntervalSince1970: 1_796_032_200.5)) == "2026-11-30T09:50:00.500Z")
        // Cut, never rounded up: an instant is never stamped in the next millisecond, second or year.
        #expect(Timestamp.text(Date(timeIntervalSince1970: 1_798_761_599.99951)) == "2026-12-31T23:59:59.999Z")
        #expect(Timestamp.text(Date(timeIntervalSince1970: 1_796_032_200.1236)) == "2026-11-30T09:50:00.123Z")
        #expect(Timestamp.text(Date(timeIntervalSince1970: -0.496)) == "1969-12-31T23:59:59.504Z")
        for bad in ["2026-02-30T00:00:00.000Z", "2026-11-30 09:50:00.500Z", "2026-11-30T24:00:00.000Z", "2026-11-30T09:50:00.5Z"] {
            #expect(Timestamp.date(bad) == nil, "\(bad)")
        }
    }

    @Test func configurations() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        #expect(try AgentConfiguration.parse(Array(AgentConfiguration.defaultFileText.utf8)) == AgentConfiguration())
        for _ in 0..<Self.rounds {
            var configuration = AgentConfiguration()
            configuration.pendingTimeoutSeconds = Bool.random(using: &rng) ? Double(Int.random(in: 1...600, using: &rng)) : Double.random(in: 0.001...600, using: &rng)
            configuration.cart = ["cart.json", "host/cart.json", "a b/\"q\".json", "é/c.json"].randomElement(using: &rng)!
            configuration.keys.products = Self.id(&rng)
            configuration.keys.id = Self.id(&rng)
            configuration.keys.quantity = Self.id(&rng)
            configuration.keys.syncedThrough = Self.id(&rng)
            // Keys that clash are refused (a test of their own): the round trip takes distinct ones.
            while configuration.keys.quantity.utf8.elementsEqual(configuration.keys.id.utf8) { configuration.keys.quantity += "q" }
            while configuration.keys.syncedThrough.utf8.elementsEqual(configuration.keys.products.utf8) { configuration.keys.syncedThrough += "s" }
            configuration.limits.maxFileBytes = Int.random(in: 1...Int(Int32.max), using: &rng)
            configuration.limits.maxQuantity = Int.random(in: 1...1_000_000_000, using: &rng)
            configuration.limits.maxIdBytes = Int.random(in: 1...4096, using: &rng)
            configuration.logFormat = Bool.random(using: &rng) ? .human : .json
            configuration.followSymlinks = Bool.random(using: &rng)
            configuration.rotate = Bool.random(using: &rng) ? nil
                : AgentConfiguration.Rotation(maxBytes: Int.random(in: 1...(1 << 40), using: &rng), keep: Int.random(in: 1...1000, using: &rng))
            configuration.retention = Bool.random(using: &rng) ? nil
                : AgentConfiguration.Retention(days: Double(Int.random(in: 1...36_500_000, using: &rng)) / 1000)
            let text = configuration.fileText
            #expect(try AgentConfiguration.parse(Array(text.utf8)) == configuration, "seed \(seed): \(text)")
        }
    }

    /// A state made by up to `steps` random inputs to the library's state machine.
    static func drivenState(_ rng: inout SplitMix64, steps: Int) -> SyncState {
        var machine = SyncStateMachine(state: SyncState(syncId: Self.id(&rng)), isSynchronizerRegistered: true)
        var now = Date(timeIntervalSinceReferenceDate: Double.random(in: 0...1e9, using: &rng))
        for _ in 0..<Int.random(in: 0...steps, using: &rng) {
            now = now.addingTimeInterval(Double.random(in: 0...6, using: &rng))
            switch Int.random(in: 0..<6, using: &rng) {
            case 0: _ = try? machine.receive(.basketDelta(Self.lines(&rng, signed: true)), source: Self.id(&rng), at: now)
            case 1: _ = try? machine.receive(.basketTransfer(Self.lines(&rng, signed: false), transferId: Self.id(&rng)), source: nil, at: now)
            case 2: _ = try? machine.retailerBasketChanged(Self.lines(&rng, signed: false), syncedThrough: Bool.random(using: &rng) ? machine.state.lastOutboxSeq : nil, at: now)
            case 3: _ = machine.setSelectedStore(externalId: Self.id(&rng), mode: .retailer, at: now)
            case 4: _ = try? machine.handlePayment(totalPrice: Money("1.50")!, productList: Self.lines(&rng, signed: false), orderId: Self.id(&rng), at: now)
            default: _ = machine.expireWindows(at: now)
            }
        }
        return machine.state
    }

    @Test func statesRandomlyDriven() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        for _ in 0..<Self.rounds / 5 {
            let state = Self.drivenState(&rng, steps: 30)
            #expect(try StateFormat.decode(StateFormat.encode(state)) == state, "seed \(seed)")
            // The one-pass reader answers for what the writer wrote, an id with an escape aside
            // (left to the tree decoder), and answers the same.
            let encoded = StateFormat.encode(state)
            if !encoded.contains(UInt8(ascii: "\\")) { #expect(StateFastReader.read(encoded) == state, "seed \(seed)") }
            #expect(try StateFormat.decodeTree(encoded) == state, "seed \(seed)")
            // Each pending batch as a row of its own: read back in one pass and through the tree.
            for batch in state.pending + state.rolledBack {
                let row = StateFormat.encode(batch)
                #expect(try StateFormat.decodeBatch(row) == batch, "seed \(seed)")
                #expect(try StateFormat.decodeBatchTree(row) == batch, "seed \(seed)")
                if !row.contains(UInt8(ascii: "\\")) { #expect(StateFastReader.readBatches(row) == [batch], "seed \(seed)") }
            }
            // What the library's Codable writes reads back here (a host that saved the state with
            // JSONEncoder can hand it to the agent), and through JSONDecoder, canonical pairs kept.
            #expect(try StateFormat.decode(Array(JSONEncoder().encode(state))) == state, "seed \(seed)")
            #expect(try JSONDecoder().decode(SyncState.self, from: JSONEncoder().encode(state)) == state, "seed \(seed)")
        }
    }

    /// Every counter is written under its name and read back: each set to a value of its own
    /// (a counter the writer left out, or wrote under another's name, reads back otherwise).
    @Test func everyCounterIsWrittenUnderItsName() throws {
        var state = SyncState(syncId: "s")
        for (index, field) in StateFormat.counterFields.enumerated() { state.counters[keyPath: field.1] = UInt64(1_000 + index) }
        #expect(StateFormat.counterNames.map { "\($0)" } == StateFormat.counterFields.map { $0.0 })
        #expect(StateFormat.counterValues(state.counters) == (0..<StateFormat.counterFields.count).map { UInt64(1_000 + $0) })
        let encoded = StateFormat.encode(state)
        #expect(StateFastReader.read(encoded) == state)
        #expect(try StateFormat.decodeTree(encoded) == state)
        let text = String(decoding: encoded, as: UTF8.self)
        for (index, field) in StateFormat.counterFields.enumerated() { #expect(text.contains("\"\(field.0)\":\(1_000 + index)"), "\(field.0)") }
    }

    /// The one-pass state reader against the tree decoder, on states damaged at random (a byte
    /// cut, doubled or replaced by one JSON gives a meaning to; a minus sign before a number; a
    /// member said twice; spaces put between tokens):
    /// wherever the one-pass reader answers, the tree decoder reads the same state — it never
    /// takes what the tree decoder would refuse, nor reads it otherwise.
    @Test func theOnePassStateReaderAnswersOnlyAsTheTreeDecoderDoes() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        var answered = 0
        for round in 0..<Self.rounds {
            var bytes = StateFormat.encode(Self.drivenState(&rng, steps: 12))
            bytes = Self.damaged(bytes, &rng)
            guard let fast = StateFastReader.read(bytes) else { continue }
            answered += 1
            let tree = try? StateFormat.decodeTree(bytes)
            #expect(tree == fast, "seed \(seed), round \(round): \(String(decoding: bytes, as: UTF8.self))")
        }
        // Not a vacuous comparison: many damaged states still read (a digit changed, a space).
        #expect(answered > Self.rounds / 50, "seed \(seed): only \(answered) answered")
    }

    /// `bytes` damaged once or twice: a byte cut, doubled or replaced by one JSON gives a
    /// meaning to; a digit changed; a minus sign before a number; a member said twice; a space
    /// put between tokens.
    static func damaged(_ bytes: [UInt8], _ rng: inout SplitMix64) -> [UInt8] {
        var bytes = bytes
        let significant = Array("{}[]:,\"\\ -+.0123456789eEnull".utf8)
        for _ in 0..<Int.random(in: 1...2, using: &rng) {
            let at = Int.random(in: 0..<bytes.count, using: &rng)
            let digits = UInt8(ascii: "0")...UInt8(ascii: "9")
            switch Int.random(in: 0..<8, using: &rng) {
            case 0: bytes.remove(at: at)
            case 1: bytes.insert(bytes[at], at: at)
            case 2: bytes[at] = significant.randomElement(using: &rng)!
            case 3:
                // A digit changed (a leading zero, an overflow, a seq another than it was).
                if let digit = (at..<bytes.count).first(where: { digits.contains(bytes[$0]) }) { bytes[digit] = Bool.random(using: &rng) ? UInt8(ascii: "0") : UInt8.random(in: digits, using: &rng) }
            case 4:
                // A minus sign before a number (a seq or a counter cannot be negative).
                if let number = (at..<bytes.count).first(where: { digits.contains(bytes[$0]) && !digits.contains(bytes[$0 - 1]) }) { bytes.insert(UInt8(ascii: "-"), at: number) }
            case 5:
                // A member said twice (`"key":value,"key":value`, its value a number or a string).
                let quote = UInt8(ascii: "\""), colon = UInt8(ascii: ":")
                if let key = (at..<(bytes.count - 1)).first(where: { bytes[$0] == quote && bytes[$0 + 1] == colon }),
                   let open = (0..<key).last(where: { bytes[$0] == quote }),
                   let end = ((key + 2)..<bytes.count).first(where: { [UInt8(ascii: ","), UInt8(ascii: "}")].contains(bytes[$0]) }),
                   !bytes[(key + 2)..<end].contains(where: { [UInt8(ascii: "{"), UInt8(ascii: "[")].contains($0) }) {
                    bytes.insert(contentsOf: [UInt8(ascii: ",")] + bytes[open..<end], at: end)
                }
            default:
                if let boundary = (at..<bytes.count).first(where: { [UInt8(ascii: ","), UInt8(ascii: ":")].contains(bytes[$0]) }) {
                    bytes.insert([0x20, 0x0A, 0x09].randomElement(using: &rng)!, at: boundary + Int.random(in: 0...1, using: &rng))
                }
            }
        }
        return bytes
    }

    /// The one-pass reader of a pending batch's row against the tree decoder, on rows damaged at
    /// random: wherever it answers, the tree decoder reads the same batch.
    @Test func theOnePassBatchReaderAnswersOnlyAsTheTreeDecoderDoes() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        var answered = 0
        var rounds = 0
        while rounds < Self.rounds {
            let state = Self.drivenState(&rng, steps: 12)
            for batch in state.pending + state.rolledBack {
                rounds += 1
                let bytes = Self.damaged(StateFormat.encode(batch), &rng)
                guard let fast = StateFastReader.readBatches(bytes), fast.count == 1 else { continue }
                answered += 1
                #expect((try? StateFormat.decodeBatchTree(bytes)) == fast[0], "seed \(seed), round \(rounds): \(String(decoding: bytes, as: UTF8.self))")
            }
        }
        #expect(answered > Self.rounds / 50, "seed \(seed): only \(answered) answered")
    }

    /// The writer's numbers are the numbers' decimal text, at every width and sign; its strings
    /// read back equal through Foundation's parser, are one line (no byte below 0x20, no DEL, no
    /// U+0085, U+2028 or U+2029 left raw), and printable ASCII without a quote or a backslash is
    /// written as it is.
    @Test func numbersAndStringsAreWrittenAsJSONSays() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        var numbers: [Int64] = [0, 1, -1, 9, 10, -10, Int64.max, Int64.min, 1_000_000, -999_999]
        for _ in 0..<Self.rounds { numbers.append(Int64(bitPattern: rng.next()) >> Int64(rng.below(64))) }
        for number in numbers {
            var writer = JSONWriter()
            writer.integer(number)
            #expect(writer.text == String(number), "seed \(seed)")
        }
        var unsigned = JSONWriter()
        unsigned.integer(UInt64.max)
        #expect(unsigned.text == String(UInt64.max))
        let pieces = ["a", "Z", "0", " ", "~", "\"", "\\", "\n", "\t", "\u{0}", "\u{1F}", "\u{7F}", "\u{85}", "\u{2028}", "\u{2029}", "é", "€", "😀", "\u{80}", "\u{E2}"]
        for _ in 0..<Self.rounds {
            let text = (0..<rng.below(12)).map { _ in pieces[rng.below(pieces.count)] }.joined()
            var writer = JSONWriter()
            writer.string(text)
            let bytes = writer.bytes
            #expect(!bytes.contains { $0 < 0x20 || $0 == 0x7F }, "seed \(seed): \(writer.text)")
            for raw in ["\u{85}", "\u{2028}", "\u{2029}"] { #expect(!writer.text.contains(raw), "seed \(seed): \(writer.text)") }
            let parsed = try JSONSerialization.jsonObject(with: Data(bytes), options: .fragmentsAllowed) as? String
            #expect(parsed == text, "seed \(seed): \(writer.text)")
            if text.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F && $0 != 0x22 && $0 != 0x5C }) {
                #expect(writer.text == "\"\(text)\"", "seed \(seed)")
            }
        }
    }
}
