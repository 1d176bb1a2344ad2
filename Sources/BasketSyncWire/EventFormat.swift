import BasketSync

/// An inbox event as the Mealz side wrote it.
package struct InboxEvent: Equatable, Sendable {
    /// The event's id: unique per event, a redelivered id is processed once.
    package var id: String
    /// What the event asks for.
    package var event: MealzEvent

    package init(id: String, event: MealzEvent) {
        self.id = id
        self.event = event
    }
}

/// An inbox event file: `{"id": "evt-42", "type": "basketDelta", "products": [...]}`, with
/// `"transferId"` for a `basketTransfer`. Always the default key names: the Mealz side's format
/// is fixed, only the host's cart format is renamed.
package enum EventFormat {
    private static let types = "use basketDelta, basketState, basketTransfer or redirectToCart"

    /// Parses and validates an event; every problem is reported, with its position.
    package static func decode(_ bytes: [UInt8], limits: InputLimits) throws(DecodingFailure) -> InboxEvent {
        let root = try FieldReader.parse(bytes)
        var fields = FieldReader(limits: limits)
        let event = read(root, &fields)
        return try fields.result(event)
    }

    /// The file `push` delivers for `event`, ending in a newline.
    package static func encode(_ event: InboxEvent) -> [UInt8] {
        var writer = JSONWriter()
        writer.object { object in
            object.member("id", event.id)
            switch event.event {
            case let .basketDelta(lines):
                object.member("type", "basketDelta")
                object.member("products", products: lines)
            case let .basketState(lines, basket):
                object.member("type", "basketState")
                if let basket { object.member("basket", basket) }
                object.member("products", products: lines)
            case let .basketTransfer(lines, transferId):
                object.member("type", "basketTransfer")
                object.member("transferId", transferId)
                object.member("products", products: lines)
            case .redirectToCart:
                object.member("type", "redirectToCart")
            }
        }
        writer.raw("\n")
        return writer.bytes
    }

    private static func read(_ root: JSONNode, _ fields: inout FieldReader) -> InboxEvent? {
        guard case .object = root.value else {
            fields.problem(root, "an event must be an object with \"id\" and \"type\", not \(root.kind)")
            return nil
        }
        let id = fields.identifier(root["id"], in: root, key: "id", what: "the event")
        guard let typeNode = root["type"] else {
            fields.problem(root, "the event has no \"type\"; \(types)")
            return nil
        }
        guard case let .string(type) = typeNode.value else {
            fields.problem(typeNode, "\"type\" must be a string, not \(typeNode.kind)")
            return nil
        }
        let event: MealzEvent?
        switch type {
        case "basketDelta": event = products(root, signed: true, &fields).map(MealzEvent.basketDelta)
        case "basketState":
            let basket = basketNumber(root, &fields)
            event = products(root, signed: false, &fields).map { MealzEvent.basketState($0, basket: basket) }
        case "basketTransfer":
            let transferId = fields.identifier(root["transferId"], in: root, key: "transferId", what: "a basketTransfer")
            let products = products(root, signed: false, &fields)
            if let transferId, let products { event = .basketTransfer(products, transferId: transferId) } else { event = nil }
        case "redirectToCart": event = .redirectToCart
        default:
            fields.problem(typeNode, "unknown type \(JSONWriter.quoted(type)); \(types)")
            event = nil
        }
        guard let id, let event else { return nil }
        return InboxEvent(id: id, event: event)
    }

    /// A `basketState`'s optional `"basket"`: the number of the notification it was based on.
    private static func basketNumber(_ root: JSONNode, _ fields: inout FieldReader) -> UInt64? {
        guard let node = root["basket"] else { return nil }
        if case .null = node.value { return nil }
        guard let value = node.integer, value >= 1, UInt64(value) <= SyncState.largestSeq else {
            let given = node.integer.map { "\($0)" } ?? node.kind
            fields.problem(node, "\"basket\" must be a whole number from 1 to \(SyncState.largestSeq) (the basket of the notification the state was based on), not \(given)")
            return nil
        }
        return UInt64(value)
    }

    private static func products(_ root: JSONNode, signed: Bool, _ fields: inout FieldReader) -> [RetailerProduct]? {
        guard let products = root["products"] else {
            fields.problem(root, "the event has no \"products\" list; add one")
            return nil
        }
        return fields.lines(products, signed: signed)
    }
}
