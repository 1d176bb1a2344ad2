@testable import BasketSyncWire
import BasketSync
import Testing

/// The JSON parser and the cart, event and configuration decoders: every bad input gets a
/// position and a reason, never a crash.
@Suite struct ParserTests {
    func problem(_ text: String, allowComments: Bool = false) -> String? {
        let bytes = Array(text.utf8)
        do {
            _ = try JSONParser.parse(bytes, allowComments: allowComments)
            return nil
        } catch {
            let (line, column) = lineAndColumn(of: error.offset, in: bytes)
            return "\(line):\(column): \(error.reason)"
        }
    }

    @Test(arguments: [
        ("", "1:1: the file is empty; it must hold one JSON value"),
        ("{", "1:2: unexpected end of file; expected a key in double quotes"),
        ("{\"a\":1", "1:7: the file ends inside an object; expected '}'"),
        ("[1,]", "1:4: unexpected ']'; expected a JSON value"),
        ("{\"a\":1,\"a\":2}", "1:8: duplicate key \"a\"; keep one"),
        ("{\"a\" 1}", "1:6: unexpected '1'; expected ':' after the key"),
        ("[01]", "1:2: a number cannot start with 0"),
        ("[1.]", "1:4: a number needs digits after '.'"),
        ("[\"a\tb\"]", "1:4: a control character (0x9) inside a string; write it escaped"),
        ("[\"\\ud800\"]", "1:3: a lone UTF-16 surrogate \\uD800"),
        ("[\"\\x\"]", "1:3: unknown escape \\x in a string"),
        ("[\"abc", "1:2: this string is never closed"),
        ("{}\n{}", "2:1: unexpected '{' after the JSON value"),
        ("[tru]", "1:2: unexpected 't'; expected a JSON value"),
        ("\n\n  [\"é\", x]", "3:9: unexpected 'x'; expected a JSON value"),
    ])
    func malformedJSONIsPlacedAndExplained(input: String, expected: String) {
        #expect(problem(input) == expected)
    }

    @Test func invalidUTF8IsPlaced() {
        let bytes: [UInt8] = Array("[\"ab".utf8) + [0xFF] + Array("\"]".utf8)
        #expect(throws: JSONProblem(offset: 4, reason: "invalid UTF-8; the file must be UTF-8")) { try JSONParser.parse(bytes) }
    }

    @Test func deepNestingIsRefusedWithoutExhaustingTheStack() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(problem(deep) == "1:65: nesting deeper than 64 levels")
    }

    @Test func aByteOrderMarkIsSkippedAndCommentsAreForTheConfigurationOnly() throws {
        #expect(throws: Never.self) { try JSONParser.parse([0xEF, 0xBB, 0xBF] + Array("[1]".utf8)) }
        #expect(problem("// note\n[1]") == "1:1: unexpected '/'; expected a JSON value")
        #expect(problem("// note\n[1] // end", allowComments: true) == nil)
    }

    @Test func escapesDecodeExactly() throws {
        let node = try JSONParser.parse(Array(#"["a\"b\\c\/\n\u00e9\ud83d\ude00"]"#.utf8))
        guard case let .array(items) = node.value, case let .string(text) = items[0].value else {
            Issue.record("not a string array")
            return
        }
        #expect(text == "a\"b\\c/\né😀")
    }

    func decodeCart(_ text: String, keys: CartKeys = CartKeys(), limits: InputLimits = InputLimits()) -> (HostCart?, [String]) {
        let bytes = Array(text.utf8)
        do { return (try CartFormat.decode(bytes, keys: keys, limits: limits), []) } catch {
            return (nil, error.problems.map { problem in
                let (line, column) = lineAndColumn(of: problem.offset, in: bytes)
                return "\(line):\(column): \(problem.reason)"
            })
        }
    }

    @Test func cartsInBothShapesAndWithRenamedKeys() {
        #expect(decodeCart(#"{"products":[{"id":"a","quantity":2,"price":"1.20"}],"syncedThrough":17}"#).0
            == HostCart(products: [RetailerProduct(id: "a", quantity: 2)], syncedThrough: 17))
        #expect(decodeCart(#"[{"id":"a","quantity":0}]"#).0 == HostCart(products: [RetailerProduct(id: "a", quantity: 0)], syncedThrough: nil))
        var keys = CartKeys()
        keys.products = "lines"
        keys.id = "sku"
        keys.quantity = "qty"
        #expect(decodeCart(#"{"lines":[{"sku":"a","qty":3}]}"#, keys: keys).0 == HostCart(products: [RetailerProduct(id: "a", quantity: 3)], syncedThrough: nil))
    }

    @Test func everyProblemOfACartIsReported() {
        let text = """
            {"products": [
              {"id": "", "quantity": 1},
              {"id": "b", "quantity": 1e3},
              {"id": "c", "quantity": 99999999999999999999},
              {"id": "d\\u0007", "quantity": 1},
              {"quantity": 2},
              {"id": 7, "quantity": "2"},
              3
            ], "syncedThrough": -1}
            """
        let (cart, problems) = decodeCart(text)
        #expect(cart == nil)
        #expect(problems == [
            "2:10: \"id\" is empty; give a non-empty id",
            "3:27: \"quantity\" 1e3 must be a whole number written in digits alone (no fraction, no exponent: 100, not 1e2 or 100.0)",
            "4:27: \"quantity\" 99999999999999999999 is out of range; the limit is 1000000",
            "5:10: \"id\" contains a control character; ids are printable text",
            "6:3: this line has no \"id\"; add one",
            "7:10: \"id\" must be a string, not a number",
            "7:25: \"quantity\" must be a whole number, not a string",
            "8:3: a line must be an object like {\"id\": \"sku-1\", \"quantity\": 2}, not a number",
            "9:21: \"syncedThrough\" must be the highest outbox seq processed, a whole number from 0 to 9007199254740991",
        ])
    }

    @Test func limitsApplyToQuantitiesAndIds() {
        var limits = InputLimits()
        limits.maxQuantity = 10
        limits.maxIdBytes = 4
        let (_, problems) = decodeCart(#"[{"id":"abcde","quantity":11}]"#, limits: limits)
        #expect(problems == [
            "1:8: \"id\" is 5 bytes long, over the limit of 4",
            "1:27: \"quantity\" 11 is out of range; the limit is 10",
        ])
    }

    func decodeEvent(_ text: String) -> (InboxEvent?, [String]) {
        let bytes = Array(text.utf8)
        do { return (try EventFormat.decode(bytes, limits: InputLimits()), []) } catch {
            return (nil, error.problems.map { "\(lineAndColumn(of: $0.offset, in: bytes).column): \($0.reason)" })
        }
    }

    @Test func inboxEventsOfEachType() {
        #expect(decodeEvent(#"{"id":"e1","type":"basketDelta","products":[{"id":"a","quantity":-2}]}"#).0
            == InboxEvent(id: "e1", event: .basketDelta([RetailerProduct(id: "a", quantity: -2)])))
        #expect(decodeEvent(#"{"id":"e2","type":"basketState","products":[]}"#).0 == InboxEvent(id: "e2", event: .basketState([])))
        #expect(decodeEvent(#"{"id":"e3","type":"basketTransfer","transferId":"t","products":[{"id":"a","quantity":1}]}"#).0
            == InboxEvent(id: "e3", event: .basketTransfer([RetailerProduct(id: "a", quantity: 1)], transferId: "t")))
        #expect(decodeEvent(#"{"id":"e4","type":"redirectToCart"}"#).0 == InboxEvent(id: "e4", event: .redirectToCart))
        #expect(decodeEvent(#"{"id":"e5","type":"basketState","products":[{"id":"a","quantity":-1}]}"#).1
            == ["66: \"quantity\" is -1; an absolute quantity must be 0 or more"])
        #expect(decodeEvent(#"{"id":"e6","type":"explode"}"#).1
            == ["19: unknown type \"explode\"; use basketDelta, basketState, basketTransfer or redirectToCart"])
        #expect(decodeEvent(#"{"type":"redirectToCart"}"#).1 == ["1: the event has no \"id\"; add one"])
    }

    @Test func theDefaultConfigurationFileParsesToTheDefaults() throws {
        let parsed = try AgentConfiguration.parse(Array(AgentConfiguration.defaultFileText.utf8))
        #expect(parsed == AgentConfiguration())
    }

    @Test(arguments: [
        ("{\"pendingTimeoutSeconds\": 0}", "1:27: \"pendingTimeoutSeconds\" must be a number of seconds above 0 and at most 31536000 (a year; fractions allowed), such as 10"),
        ("{\"pendingTimeoutSeconds\": 31536000.5}", "1:27: \"pendingTimeoutSeconds\" must be a number of seconds above 0 and at most 31536000 (a year; fractions allowed), such as 10"),
        ("{\"cart\": \"../elsewhere.json\"}", "1:10: \"cart\" must be a file path inside the sync directory, such as \"cart.json\""),
        ("{\"colour\": true}", "1:12: unknown setting \"colour\"; see the comments that basket-sync init writes"),
        ("{\n  \"logFormat\": \"xml\"\n}", "2:16: \"logFormat\" must be \"human\" or \"json\""),
        ("{\"limits\": {\"maxQuantity\": -5}}", "1:28: \"limits.maxQuantity\" must be a whole number above 0"),
        ("{\"limits\": {\"maxQuantity\": 9007199254740992}}",
         "1:28: \"limits.maxQuantity\" must be at most 9007199254740991 (2^53 - 1: every JSON reader keeps it exact, and quantities added up past it are seen past it)"),
    ])
    func aBadConfigurationNamesTheSetting(text: String, expected: String) {
        let bytes = Array(text.utf8)
        #expect(throws: JSONProblem.self) { try AgentConfiguration.parse(bytes) }
        do {
            _ = try AgentConfiguration.parse(bytes)
        } catch {
            let (line, column) = lineAndColumn(of: error.offset, in: bytes)
            #expect("\(line):\(column): \(error.reason)" == expected)
        }
    }

    /// The cart, and a metrics file given relative to the sync directory, never name one of
    /// basket-sync's own files or folders (its settings, a JSON Lines file or any of its rotated
    /// parts, `.basket-sync/`, `inbox/`, a name starting with `.basket-sync`), nor each other:
    /// rotation would rename a JSON Lines file over the cart, metrics written in `inbox/new/`
    /// would be delivered as an event. Names beside them stay the host's.
    @Test func theCartAndTheMetricsFileNeverNameBasketSyncsOwnFiles() throws {
        func refusal(_ settings: String) -> String? {
            do {
                _ = try AgentConfiguration.parse(Array(settings.utf8))
                return nil
            } catch {
                return error.reason
            }
        }
        var own = ["basket-sync.json", ".basket-sync", ".basket-sync/state.db", "inbox", "inbox/new/x", "inbox/cur/x", ".basket-sync-cart",
                   "host/.basket-sync/x", "host/.basket-sync-cart"]
        for name in ["outbox.jsonl", "notifications.jsonl", "payments.jsonl"] {
            own += [name] + (Array(1...12) + [99, 1000, 123_456]).map { "\(name).\($0)" }
        }
        for path in own {
            #expect(refusal(#"{"cart": "\#(path)"}"#)?.contains("\"cart\" names one of basket-sync's own files or folders") == true, "cart \(path)")
        }
        for metrics in ["inbox/new/m.prom", "./inbox/new/m.prom", "inbox//tmp/m.prom", ".basket-sync/m.prom", "host/.basket-sync/m.prom",
                        ".basket-sync-cart.prom", "./.basket-sync-m.prom"] {
            let reason = refusal(#"{"metrics": "\#(metrics)"}"#)
            #expect(reason?.contains("\"metrics\" names the cart or one of basket-sync's own files or folders") == true, "metrics \(metrics): \(reason ?? "taken")")
        }
        for path in ["cart.json", "host/cart.json", "host/outbox.jsonl", "outbox.jsonl.bak", "outbox.jsonl.1a", "outbox.jsonl.", "inboxes/cart.json", "basket-sync.json.d/cart.json"] {
            #expect(refusal(#"{"cart": "\#(path)"}"#) == nil, "cart \(path)")
        }
        // The metrics file and the cart: never the same file, whatever the order of the settings.
        #expect(refusal(#"{"cart": "shop.prom", "metrics": "./shop.prom"}"#)?.contains("\"metrics\" names the cart") == true)
        #expect(refusal(#"{"metrics": "shop.prom", "cart": "shop.prom"}"#)?.contains("\"metrics\" names the cart") == true)
        #expect(refusal(#"{"metrics": "/var/lib/prometheus/node-exporter/basket-sync.prom"}"#) == nil)
        for metrics in ["basket-sync.prom", "inbox.prom", "metrics/inbox.prom", "outbox.jsonl.prom"] { #expect(refusal(#"{"metrics": "\#(metrics)"}"#) == nil, "metrics \(metrics)") }
    }

    /// An absolute "metrics" or "database" is judged by where it lies, through links: a metrics
    /// file that lies in the sync directory follows the relative rule (in a tree, also inside a
    /// cart's own folders); the database never lies inside the sync directory or tree root.
    @Test func absolutePathsAreJudgedWhereTheyLie() throws {
        // "/alias" is a link to the sync directory; "/srv/shop" is its real path.
        let place = AgentConfiguration.Place(directory: "/alias") { path in
            path == "/alias" || path.hasPrefix("/alias/") ? "/srv/shop" + path.dropFirst("/alias".count) : path
        }
        func refusal(_ settings: String) -> String? {
            do {
                _ = try AgentConfiguration.parse(Array(settings.utf8), in: place)
                return nil
            } catch {
                return error.reason
            }
        }
        let ownMetrics = "\"metrics\" names the cart or one of basket-sync's own files or folders"
        for metrics in ["/srv/shop/inbox/new/m.prom", "/alias/inbox/new/m.prom", "/srv/shop/.basket-sync/m.prom", "/alias/inbox/m.prom",
                        "/srv/shop/.basket-sync-m.prom", "/alias/host/.basket-sync/m.prom"] {
            #expect(refusal(#"{"metrics": "\#(metrics)"}"#)?.contains(ownMetrics) == true, "metrics \(metrics)")
        }
        #expect(refusal(#"{"cart": "host/shop.prom", "metrics": "/alias/host/shop.prom"}"#)?.contains(ownMetrics) == true)
        for metrics in ["/srv/shop/basket-sync.prom", "/alias/metrics/m.prom", "/srv/shopping/inbox/new/m.prom", "/var/lib/node/m.prom"] {
            #expect(refusal(#"{"metrics": "\#(metrics)"}"#) == nil, "metrics \(metrics)")
        }
        // In a tree, a cart's own folders and its cart are basket-sync's or the host's, not metrics'.
        for metrics in ["c1/inbox/new/m.prom", "/alias/c1/.basket-sync-m.prom", "/srv/shop/c1/inbox/m.prom", "c1/.basket-sync/m.prom"] {
            #expect(refusal(#"{"layout": "tree", "metrics": "\#(metrics)"}"#)?.contains(ownMetrics) == true, "tree metrics \(metrics)")
        }
        #expect(refusal(#"{"layout": "tree", "cart": "shop.prom", "metrics": "/alias/c1/shop.prom"}"#)?.contains(ownMetrics) == true)
        #expect(refusal(#"{"layout": "tree", "metrics": "/srv/shop/tree.prom"}"#) == nil)
        let inside = "\"database\" lies inside the sync directory"
        for database in ["/srv/shop", "/alias", "/srv/shop/inbox/new", "/alias/.basket-sync", "/srv/shop/db", "/alias/cart.json"] {
            #expect(refusal(#"{"database": "\#(database)"}"#)?.contains(inside) == true, "database \(database)")
            #expect(refusal(#"{"layout": "tree", "database": "\#(database)"}"#)?.contains(inside) == true, "tree database \(database)")
        }
        for database in ["/srv/shop-db", "/srv/db", "/var/lib/basket-sync/shop", "/srv"] {
            #expect(refusal(#"{"database": "\#(database)"}"#) == nil, "database \(database)")
        }
    }

    @Test func recordsAreOneLineWhateverTheIdsHold() {
        let record = OutboxRecord(
            seq: 3, id: "s-3", type: .updateBasket, at: Date(timeIntervalSince1970: 1_796_032_200.5), source: "e\"1\n",
            products: [RetailerProduct(id: "a\u{2028}\u{7}\\", quantity: -1)])
        let line = String(decoding: RecordFormat.line(record), as: UTF8.self)
        #expect(line == #"{"seq":3,"id":"s-3","type":"updateBasket","at":"2026-11-30T09:50:00.500Z","source":"e\"1\n","products":[{"id":"a\u2028\u0007\\","quantity":-1}]}"# + "\n")
        #expect(line.filter { $0 == "\n" }.count == 1)
    }
}
