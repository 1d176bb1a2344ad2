import BasketSync
import Foundation
import BasketSyncAgent
import BasketSyncWire
import Seeded

/// The cart a host left, as far as the rules look at it.
struct LeftCart {
    /// Quantity per SKU; lines at 0 count as absent (a host may keep or remove them).
    var quantities: [ExactID: Int] = [:]
    var labels: [ExactID: String] = [:]
    var syncedThrough: UInt64?
    /// The top-level members other than the lines and syncedThrough, as compact JSON.
    var others: [String: String] = [:]
    /// Lines with a negative quantity.
    var negative: [(ExactID, Int)] = []
    /// Every line's id and quantity, in the cart's order (those at 0 too).
    var lines: [(id: ExactID, quantity: Int)] = []

    /// The quantities of `id`'s lines, in their order.
    func lines(of id: ExactID) -> [Int] { lines.filter { $0.id == id }.map(\.quantity) }

    var shown: String {
        let lines = quantities.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        return "{" + lines.joined(separator: ", ") + "}"
    }
}

/// The rules judged on what a host left.
extension ScenarioRun {
    mutating func fail(_ rule: HostCheck.Rule, _ detail: String) {
        if findings.contains(where: { $0.rule == rule }) { return }
        findings.append(HostCheck.Finding(scenario: name, rule: rule, detail: detail))
    }

    /// The cart as the rules look at it; nil when it cannot be read (a finding is made).
    func leftCart() throws(AgentError) -> LeftCart? {
        guard let bytes = try? Posix.readFile(cartPath, limit: configuration.limits.maxFileBytes, follow: configuration.followSymlinks) else { return nil }
        guard let root = try? JSONParser.parse(bytes) else { return nil }
        var cart = LeftCart()
        var lines: [JSONNode] = []
        switch root.value {
        case let .array(elements):
            lines = elements
        case let .object(members):
            for member in members {
                if member.key.isByteEqual(to: keys.products), case let .array(elements) = member.node.value {
                    lines = elements
                } else if member.key.isByteEqual(to: keys.syncedThrough) {
                    cart.syncedThrough = member.node.integer.flatMap { $0 >= 0 ? UInt64($0) : nil }
                } else {
                    var writer = JSONWriter()
                    member.node.write(into: &writer)
                    cart.others[member.key] = writer.text
                }
            }
        default:
            return nil
        }
        for line in lines {
            guard case let .string(id)? = line[keys.id]?.value, let quantity = line[keys.quantity]?.integer else { continue }
            let key = ExactID(id)
            cart.lines.append((key, quantity))
            cart.quantities[key, default: 0] += quantity
            if case let .string(label)? = line["label"]?.value ?? line["hostLabel"]?.value { cart.labels[key] = label }
        }
        for (id, quantity) in cart.quantities where quantity < 0 { cart.negative.append((id, quantity)) }
        cart.quantities = cart.quantities.filter { $0.value > 0 }
        return cart
    }

    /// The records of the outbox, in seq order.
    func records() throws(AgentError) -> [OutboxRecord] {
        try engine.store.withTransaction { () throws(AgentError) in try engine.store.lines(.outbox, after: 0) }
            .compactMap { try? RecordFormat.outboxRecord($0.line) }
    }

    /// The quantities records lead to from the starting cart, as a host must apply them.
    func model(_ records: [OutboxRecord], clamp: Bool = true) -> [ExactID: Int] {
        var quantities = initial.quantities
        for record in records where record.type == .updateBasket {
            for delta in record.products {
                let id = ExactID(delta.id)
                // A host clamps at 0 (the library's own rule); a host that does not is modelled too.
                quantities[id] = clamp ? RetailerProduct.applying(delta: delta.quantity, to: quantities[id] ?? 0) : (quantities[id] ?? 0) + delta.quantity
            }
        }
        return clamp ? quantities.filter { $0.value > 0 } : quantities.mapValues { max(0, $0) }.filter { $0.value > 0 }
    }

    /// The lines of each id held on more than one line at the start, as the records leave them
    /// (docs/spec.md §3): an increase on the id's first line, a decrease taken from its last
    /// line back, each line down to 0 at most; a line brought to 0 leaves, one at 0 already stays.
    func modelLines(_ records: [OutboxRecord]) -> [ExactID: [Int]] {
        let ids = Set(initial.lines.map(\.id)).filter { id in initial.lines.filter { $0.id == id }.count > 1 }
        var held = Dictionary(uniqueKeysWithValues: ids.map { ($0, initial.lines(of: $0)) })
        for record in records where record.type == .updateBasket {
            for delta in record.products {
                let id = ExactID(delta.id)
                guard var lines = held[id] else { continue }
                if lines.isEmpty {
                    if delta.quantity > 0 { lines = [delta.quantity] }
                } else if delta.quantity >= 0 {
                    lines[0] += delta.quantity
                } else {
                    var rest = -delta.quantity
                    for index in lines.indices.reversed() where rest > 0 {
                        let taken = min(rest, max(0, lines[index]))
                        lines[index] -= taken
                        rest -= taken
                        if taken > 0, lines[index] == 0 { lines.remove(at: index) }
                    }
                }
                held[id] = lines
            }
        }
        return held
    }

    /// The starting lines that never reach 0 along the records: a host keeps them as they are.
    func stayingLines(_ records: [OutboxRecord]) -> Set<ExactID> {
        var quantities = initial.quantities
        var staying = Set(quantities.keys)
        for record in records where record.type == .updateBasket {
            for delta in record.products {
                let id = ExactID(delta.id)
                quantities[id] = RetailerProduct.applying(delta: delta.quantity, to: quantities[id] ?? 0)
                if quantities[id] == 0 { staying.remove(id) }
            }
        }
        return staying
    }

    /// Quantities summed under ids in Unicode's canonical composition (NFC).
    static func normalized(_ quantities: [ExactID: Int]) -> [String: Int] {
        var summed: [String: Int] = [:]
        for (id, quantity) in quantities { summed[id.string.precomposedStringWithCanonicalMapping, default: 0] += quantity }
        return summed
    }

    /// An id with every non-ASCII scalar spelled as \u{…}: NFC and NFD twins look alike printed.
    static func spelled(_ id: ExactID) -> String {
        "\"" + id.string.unicodeScalars.map { $0.isASCII ? String($0) : "\\u{\(String($0.value, radix: 16, uppercase: true))}" }.joined() + "\""
    }

    /// Whether `id` is the line of its own a record adds (`R01`, `R02`, …, ``ScenarioRun/push(_:)``).
    static func isOwnLine(_ id: String) -> Bool {
        id.utf8.count >= 3 && id.utf8.first == UInt8(ascii: "R") && id.utf8.dropFirst().allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
    }

    static func shown(_ quantities: [ExactID: Int]) -> String {
        "{" + quantities.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ", ") + "}"
    }

    /// Checks the cart against the records; `expectAll`: every record must be applied by now.
    @discardableResult
    mutating func check(after moment: String, expectAll: Bool = false, killed: Bool = false) throws(AgentError) -> Bool {
        let all = try records()
        let last = all.last?.seq ?? 0
        let before = findings.count
        if Posix.info(cartPath, follow: false)?.identity != initialIdentity { hostWroteCart = true }
        if !hostWroteCart, last > 0, !killed {
            fail(.reports, "after \(moment), \(configuration.cart) is still the cart check-host wrote: the host applied no record and reported no \"\(keys.syncedThrough)\" (it never wrote the cart)")
            return false
        }
        guard let cart = try leftCart() else {
            if Posix.info(cartPath, follow: false).map({ $0.kind != .regular }) == true {
                fail(.valid, "after \(moment), \(configuration.cart) is not a regular file (a link, a FIFO…): basket-sync reads a cart that is a file\(configuration.followSymlinks ? "" : " (a link only with \"followSymlinks\")")")
                return false
            }
            // Too large is a cart basket-sync rejects, whole or torn: said as such, not as a torn write.
            var tooLarge = false
            do { _ = try Posix.readFile(cartPath, limit: configuration.limits.maxFileBytes, follow: configuration.followSymlinks) } catch {
                if case .tooLarge = error { tooLarge = true }
            }
            if tooLarge {
                let size = Posix.info(cartPath, follow: configuration.followSymlinks)?.size ?? 0
                fail(.valid, "after \(moment), \(configuration.cart) is \(size) bytes, over \"limits.maxFileBytes\" (\(configuration.limits.maxFileBytes)): basket-sync rejects it; raise the limit in basket-sync.json, or keep the cart smaller")
                return false
            }
            if killed {
                fail(.atomic, "\(moment), it left a cart that does not parse as JSON: write a temp file and rename it over the cart, so that a crash leaves the old cart or the new one")
            } else {
                fail(.valid, "after \(moment), \(configuration.cart) does not parse as JSON")
            }
            return false
        }
        if let (id, quantity) = cart.negative.first {
            fail(.clamp, "after \(moment), line \(id) is at \(quantity): a host clamps at 0 when asked to remove more than it has (and may remove the line)")
            return false
        }
        if let bytes = try? Posix.readFile(cartPath, limit: configuration.limits.maxFileBytes, follow: configuration.followSymlinks),
           case let .failure(error) = Result(catching: { () throws(DecodingFailure) in try CartFormat.decode(bytes, keys: keys, limits: configuration.limits) }) {
            fail(.valid, "after \(moment), basket-sync rejects the cart: \(error.descriptions(path: configuration.cart, bytes: bytes).first ?? "invalid")")
            return false
        }
        // A cart basket-sync reads: the rules about what it holds are judged from here on.
        if hostWroteCart { hostLeftReadableCart = true }
        // Other lines and fields: X is never in a record, labels stay with their lines.
        if cart.quantities["X"] != initial.quantities["X"] {
            fail(.keeps, "after \(moment), the line X (the shopper's, in no record) is \(cart.quantities["X"].map(String.init) ?? "gone"), it was \(initial.quantities["X"] ?? 0)")
        }
        // A line that went to 0 may have been removed and come back new, without its label; and
        // the labels are judged only on a cart whose quantities are right (a line a wrong
        // quantity took to 0 and back lost its label through that mistake, said by its own rule).
        let covered = all.filter { $0.seq <= (cart.syncedThrough ?? last) }
        if cart.quantities == model(covered) {
            // An id on several lines: each line where the rule puts the change, no other touched.
            // A line the host brings to 0 may leave or stay at 0 (docs/integrating.md): such lines
            // come after every other line of the id (a decrease is taken from the last line back),
            // so the host's lines are the rule's followed by lines at 0.
            func placed(_ lines: [Int], _ wanted: [Int]) -> Bool {
                lines.count >= wanted.count && Array(lines.prefix(wanted.count)) == wanted && lines.dropFirst(wanted.count).allSatisfy { $0 == 0 }
            }
            for (id, wanted) in modelLines(covered).sorted(by: { $0.key < $1.key }) where !placed(cart.lines(of: id), wanted) {
                fail(.placement, "after \(moment), the lines of \(Self.spelled(id)) are \(cart.lines(of: id)), where the records lead to \(wanted) (they were \(initial.lines(of: id))): an id's lines add up, and a delta moves them as little as it can — an increase on its first line, a decrease taken from its last line back; a line brought to 0 leaves (or stays at 0), every other line stays as it is")
            }
            let kept = stayingLines(covered)
            // The lines that stay keep their places: the ids the records never take to 0, in
            // the order of their first lines, as they were.
            func order(_ lines: [(id: ExactID, quantity: Int)]) -> [ExactID] {
                var seen = Set<ExactID>()
                return lines.compactMap { kept.contains($0.id) && seen.insert($0.id).inserted ? $0.id : nil }
            }
            if order(cart.lines) != order(initial.lines) {
                fail(.keeps, "after \(moment), the lines are in another order (\(order(cart.lines).map(Self.spelled).joined(separator: ", "))) than they were (\(order(initial.lines).map(Self.spelled).joined(separator: ", "))): a host keeps every other line as it is, in its place")
            }
            for (id, label) in initial.labels where kept.contains(id) && cart.quantities[id] != nil && cart.labels[id] != label {
                fail(.keeps, "after \(moment), the line \(id) lost its \"label\" field (\(label.debugDescription)); a host keeps the fields of a line it changes")
            }
        }
        for (key, value) in initial.others where cart.others[key] != value {
            fail(.keeps, "after \(moment), the cart's field \(key.debugDescription) is \(cart.others[key] ?? "gone"), it was \(value)")
        }
        guard let claim = cart.syncedThrough else {
            fail(.reports, "after \(moment), the cart has no \"\(keys.syncedThrough)\": basket-sync cannot tell which records it processed (the cart is \(cart.shown))")
            return false
        }
        if claim > last {
            fail(.tooFar, "after \(moment), \"\(keys.syncedThrough)\" is \(claim) but the outbox ends at \(last)")
            return false
        }
        if claim < claimBefore {
            fail(.reports, "after \(moment), \"\(keys.syncedThrough)\" went back from \(claimBefore) to \(claim) (the cart holds \(cart.shown)): a host's \"\(keys.syncedThrough)\" never moves back — records \(claim + 1)…\(claimBefore) would be taken as not applied, and its next run applies them again; write the seq of the last record applied")
            return false
        }
        // The lines moved in this run while the claim stayed where it was, with records after it:
        // the host applied records and did not say so (its next run applies them again). Killed,
        // it may as well be a host that writes the claim in a later cart: a whole run tells.
        if claim == claimBefore, claim < last, cart.quantities != quantitiesBefore {
            let detail = "after \(moment), the cart's lines changed (\(Self.shown(quantitiesBefore)) → \(cart.shown)) but \"\(keys.syncedThrough)\" stayed at \(claim) while records \(claim + 1)…\(last) wait: the host applied records without reporting them, and its next run applies them again; write the seq of the last record applied in the same cart as its lines"
            if killed {
                lateAcknowledgement = earlyAcknowledgement ?? detail
            } else {
                fail(.reports, detail)
            }
            return false
        }
        if expectAll, claim < last {
            fail(.skip, "after \(moment), \"\(keys.syncedThrough)\" is \(claim) but the outbox ends at \(last): records \(claim + 1)…\(last) were not processed")
        }
        let applied = all.filter { $0.seq <= claim }
        let expected = model(applied)
        if cart.quantities != expected {
            // Killed on a cart that acknowledged ahead of its lines: a host that writes the lines in
            // a later cart, or one that claims what it never applies — a whole run tells.
            if killed, let early = earlyAcknowledgement {
                lateAcknowledgement = early
                return false
            }
            diagnose(cart, applied: applied, claim: claim, expected: expected, moment: moment)
        }
        return findings.count == before
    }

    /// Names the mistake that explains the cart, when one does.
    mutating func diagnose(_ cart: LeftCart, applied: [OutboxRecord], claim: UInt64, expected: [ExactID: Int], moment: String) {
        let left = cart.quantities
        let leftText = "the cart holds \(cart.shown) with \"\(keys.syncedThrough)\" \(claim)"
        let wanted = "records 1…\(claim) lead to \(Self.shown(expected))"
        let before = applied.filter { $0.seq <= claimBefore }
        let since = applied.filter { $0.seq > claimBefore }
        // Ids a Unicode normalization changed: the same quantities under normalized ids, where
        // the exact ones differ (two SKUs merged, one renamed).
        if Self.normalized(left) == Self.normalized(expected) {
            let wrong = Set(expected.keys).union(left.keys).filter { left[$0] != expected[$0] }.sorted()
            return fail(.exactIds, "after \(moment), \(leftText): the ids \(wrong.map { Self.spelled($0) }.joined(separator: ", ")) do not hold what the records give them, as if ids were Unicode-normalized (NFC or NFD) — two SKUs merged, or one renamed; ids are compared byte for byte, keep them as written; \(wanted)")
        }
        if model(applied + applied) == left || (!before.isEmpty && model(before + applied) == left) {
            return fail(.once, "after \(moment), \(leftText): records were applied again\(before.isEmpty ? "" : " (it had applied 1…\(claimBefore) before)"); \(wanted)")
        }
        if model(before + since.reversed()) == left || model(applied.reversed()) == left {
            return fail(.order, "after \(moment), \(leftText): the records were applied out of seq order; \(wanted)")
        }
        // Records left out with records after them applied: a skip, however many (each record
        // adds a line of its own, which tells which records the cart holds).
        let own: [(seq: UInt64, id: ExactID)] = applied.compactMap { record in
            guard record.type == .updateBasket, let line = record.products.first(where: { Self.isOwnLine($0.id) && $0.quantity == 1 }) else { return nil }
            return (record.seq, ExactID(line.id))
        }
        if let lastHeld = own.lastIndex(where: { left[$0.id] != nil }) {
            let holes = own[..<lastHeld].filter { left[$0.id] == nil }
            if let first = holes.first {
                let named = holes.prefix(5).map { "#\($0.seq)" }.joined(separator: ", ") + (holes.count > 5 ? ", …" : "")
                return fail(.skip, "after \(moment), \(leftText): record\(holes.count > 1 ? "s" : "") \(named) \(holes.count > 1 ? "are" : "is") missing (no line \(first.id) in the cart) while records after \(holes.count > 1 ? "them" : "it") were applied; \(wanted)\(rotatedHint)")
            }
        }
        // The last records missing (each record adds a line of its own: which ones is read from
        // the cart): it claims more than it applied.
        for count in stride(from: applied.count - 1, through: 0, by: -1) where model(Array(applied.prefix(count))) == left {
            let through = count == 0 ? 0 : applied[count - 1].seq
            return fail(.tooFar, "after \(moment), \(leftText), but it holds only records 1…\(through); \(wanted)")
        }
        // One record missing: named (with those alike, which leave the same cart).
        let missing = applied.indices.filter { index in
            applied[index].type == .updateBasket && model(applied.enumerated().filter { $0.offset != index }.map(\.element)) == left
        }
        // Every removal left out: the host takes only additions (said before a missing record,
        // which a record made of removals alone would also look like).
        let removing = applied.filter { $0.products.contains { $0.quantity < 0 } }
        if !removing.isEmpty, model(applied.map(\.additionsOnly)) == left {
            let example = removing[0]
            return fail(.removals, "after \(moment), \(leftText): the removals were not applied (record #\(example.seq): \(example.products.filter { $0.quantity < 0 }.map { "\($0.id) \($0.quantity)" }.joined(separator: ", "))\(removing.count > 1 ? ", and \(removing.count - 1) more record(s)" : "")); a negative delta takes units away, clamped at 0; \(wanted)")
        }
        if let first = missing.first {
            let record = applied[first]
            let alike = missing.count > 1 ? " (or any of records \(missing.dropFirst().prefix(5).map { "#\(applied[$0].seq)" }.joined(separator: ", ")): leaving out any of them gives this cart)" : ""
            return fail(.skip, "after \(moment), \(leftText): record #\(record.seq) (\(record.products.map { "\($0.id) \($0.quantity > 0 ? "+" : "")\($0.quantity)" }.joined(separator: ", ")))\(alike) is missing; \(wanted)")
        }
        // One record applied twice (after the skip: when both explain the cart, a skip is the
        // likelier mistake).
        if let twice = applied.first(where: { $0.type == .updateBasket && model(applied + [$0]) == left }) {
            return fail(.once, "after \(moment), \(leftText): record #\(twice.seq) was applied twice; \(wanted)")
        }
        if model(applied, clamp: false) == left {
            return fail(.clamp, "after \(moment), \(leftText): a line went below 0 along the way and was not clamped there (the deltas of a SKU summed before clamping, or clamped only at the end); clamp at 0 after each record, in seq order; \(wanted)")
        }
        fail(.result, "after \(moment), \(leftText); \(wanted)\(rotatedHint)")
    }

    /// In the scenario whose outbox rotated, how records are taken (a host that counts lines
    /// skips those of the rotated files).
    var rotatedHint: String {
        name == Scenario.rotated.rawValue ? " (outbox.jsonl was rotated in this scenario: take the records by seq after your syncedThrough, never by line number, and from the rotated files too — or from basket-sync wait, which reads them from the database)" : ""
    }
}

extension OutboxRecord {
    /// The record with its removals left out, as a host that ignores negative deltas applies it.
    var additionsOnly: OutboxRecord {
        var record = self
        record.products = products.filter { $0.quantity > 0 }
        return record
    }
}
