extension JSONNode {
    /// Writes the value back as compact JSON, keys in their order, numbers as written.
    func write(into writer: inout JSONWriter) {
        switch value {
        case let .object(members):
            writer.raw("{")
            for (index, member) in members.enumerated() {
                if index > 0 { writer.raw(",") }
                writer.string(member.key)
                writer.raw(":")
                member.node.write(into: &writer)
            }
            writer.raw("}")
        case let .array(elements):
            writer.raw("[")
            for (index, element) in elements.enumerated() {
                if index > 0 { writer.raw(",") }
                element.write(into: &writer)
            }
            writer.raw("]")
        case let .string(text): writer.string(text)
        case let .number(text): writer.raw(text)
        case let .bool(flag): writer.raw(flag ? "true" : "false")
        case .null: writer.raw("null")
        }
    }

    /// A cart document written back for people: one member per line, one product line per line.
    func writeCart(productsKey: String) -> [UInt8] {
        var writer = JSONWriter()
        guard case let .object(members) = value else {
            write(into: &writer)
            writer.raw("\n")
            return writer.bytes
        }
        writer.raw("{\n")
        for (index, member) in members.enumerated() {
            writer.raw("  ")
            writer.string(member.key)
            writer.raw(": ")
            if member.key == productsKey, case let .array(lines) = member.node.value, !lines.isEmpty {
                writer.raw("[\n")
                for (lineIndex, line) in lines.enumerated() {
                    writer.raw("    ")
                    line.write(into: &writer)
                    writer.raw(lineIndex == lines.count - 1 ? "\n" : ",\n")
                }
                writer.raw("  ]")
            } else {
                member.node.write(into: &writer)
            }
            writer.raw(index == members.count - 1 ? "\n" : ",\n")
        }
        writer.raw("}\n")
        return writer.bytes
    }

    /// A node with no source position, for values made here.
    static func made(_ value: Value) -> JSONNode { JSONNode(value: value, offset: 0) }
}
