import Foundation
import Testing

/// apply, the payment commands, set-store and validate, as a host script runs them.
@Suite struct HostCommandTests {
    func syncDirectory() throws -> Playground {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        return playground
    }

    func run(_ playground: Playground, _ arguments: [String]) throws -> Run {
        try basketSync(["-C", playground.path] + arguments)
    }

    @Test func applyAppliesTheOutboxKeepsTheRestAndWritesSyncedThrough() throws {
        let playground = try syncDirectory()
        try playground.write("cart.json", """
            {"currency": "EUR", "products": [{"id": "X", "quantity": 4, "label": "bread"}, {"id": "A", "quantity": 1}], "note": {"gift": true}}
            """)
        _ = try run(playground, ["push", "A=+2", "B=+1"])
        _ = try run(playground, ["push", "A=-5", "C=-1"])
        _ = try run(playground, ["push", "--redirect"])
        _ = try run(playground, ["sync"])
        let applied = try run(playground, ["apply", "--json"])
        #expect(applied.status == 0, "\(applied.stderr)")
        #expect(applied.stdout == "{\"applied\":[1,2],\"redirects\":[3],\"syncedThrough\":3,\"clampedAtLimit\":[]}\n")

        let cart = try JSONSerialization.jsonObject(with: Data(playground.read("cart.json").utf8)) as! [String: Any]
        #expect(cart["currency"] as? String == "EUR")
        #expect((cart["note"] as? [String: Any])?["gift"] as? Bool == true)
        #expect(cart["syncedThrough"] as? Int == 3)
        let lines = cart["products"] as! [[String: Any]]
        #expect(lines.map { $0["id"] as! String } == ["X", "B"], "A went 1 + 2 − 5 → clamped at 0 and removed; C never existed")
        #expect(lines[0]["label"] as? String == "bread")
        #expect(lines[1]["quantity"] as? Int == 1)

        #expect(try run(playground, ["apply"]).stdout == "nothing to apply: the cart is synced through 3\n")
        #expect(try run(playground, ["validate", "cart.json"]).status == 0, "apply writes a valid cart")
    }

    /// A SKU on several lines adds up, and a delta lands on them as little as it can: an increase
    /// on the first line, a decrease from the last line back; the other lines and their fields
    /// stay as they are (a later duplicate line was merged into the first, its fields lost).
    @Test func applyKeepsEveryLineOfASkuThatIsOnSeveral() throws {
        let playground = try syncDirectory()
        try playground.write("cart.json", """
            {"products": [{"id": "A", "quantity": 1, "label": "x"}, {"id": "B", "quantity": 1}, {"id": "A", "quantity": 2, "label": "y"}]}
            """)
        func lines() throws -> [[String: Any]] {
            (try JSONSerialization.jsonObject(with: Data(playground.read("cart.json").utf8)) as? [String: Any])?["products"] as? [[String: Any]] ?? []
        }
        func summary(_ lines: [[String: Any]]) -> [String] {
            lines.map { "\($0["id"] as? String ?? "?"):\($0["quantity"] as? Int ?? -1):\($0["label"] as? String ?? "")" }
        }
        _ = try run(playground, ["push", "A=+1"])
        _ = try run(playground, ["sync"])
        #expect(try run(playground, ["apply"]).status == 0)
        #expect(summary(try lines()) == ["A:2:x", "B:1:", "A:2:y"], "the increase on the first line")
        _ = try run(playground, ["push", "A=-3"])
        _ = try run(playground, ["sync"])
        #expect(try run(playground, ["apply"]).status == 0)
        #expect(summary(try lines()) == ["A:1:x", "B:1:"], "4 − 3: the last line taken to 0 and removed, then the first")
        _ = try run(playground, ["push", "A=-5"])
        _ = try run(playground, ["sync"])
        #expect(try run(playground, ["apply"]).status == 0)
        #expect(summary(try lines()) == ["B:1:"])
        #expect(try run(playground, ["validate", "cart.json"]).status == 0)
    }

    /// apply takes the cart it wrote when it settles its batches, so the WebView's basis follows
    /// that cart and a basketState repeating it pushes nothing again.
    @Test func applyTakesTheCartItWroteSoTheWebViewBasisFollows() throws {
        let playground = try syncDirectory()
        try playground.write("cart.json", cartJSON([("A", 1)], syncedThrough: 0))
        _ = try run(playground, ["sync"])
        _ = try run(playground, ["push", "A=+2"])
        _ = try run(playground, ["sync"])
        #expect(try run(playground, ["apply"]).status == 0)
        let status = try JSONSerialization.jsonObject(with: Data(try run(playground, ["status", "--json"]).stdout.utf8)) as! [String: Any]
        let line = (status["mealz"] as! [[String: Any]]).first { $0["id"] as? String == "A" }
        #expect(line?["basis"] as? Int == 3, "the WebView shows what the cart holds: \(status)")
        #expect(playground.records("notifications.jsonl").last.map(products) == ["A": 3])
        // The WebView reports exactly what it was shown: nothing to push.
        _ = try run(playground, ["push", "--state", "A=3"])
        _ = try run(playground, ["sync"])
        #expect(playground.records("outbox.jsonl").count == 1, "\(playground.read("outbox.jsonl"))")
        _ = try run(playground, ["apply"])
        #expect(try JSONSerialization.jsonObject(with: Data(playground.read("cart.json").utf8)) as? [String: Any] != nil)
        #expect(playground.read("cart.json").contains("\"quantity\":3"), "\(playground.read("cart.json"))")
    }

    /// The first cart is made from nothing; a cart that went away (or whose folder did) is not
    /// started again from the new records alone.
    @Test func applyMakesTheFirstCartButNeverRestartsOneThatWentAway() throws {
        let playground = try syncDirectory()
        _ = try run(playground, ["push", "A=+1"])
        _ = try run(playground, ["sync"])
        #expect(try run(playground, ["apply"]).status == 0, "no cart ever: the first is made")
        #expect(playground.read("cart.json").contains("\"syncedThrough\": 1"))
        try FileManager.default.removeItem(atPath: playground.path + "/cart.json")
        _ = try run(playground, ["push", "B=+1"])
        _ = try run(playground, ["sync"])
        let gone = try run(playground, ["apply"])
        #expect(gone.status == 66, "\(gone.stderr)")
        #expect(gone.stderr.contains("a missing cart is not an empty cart"), "\(gone.stderr)")
        #expect(!FileManager.default.fileExists(atPath: playground.path + "/cart.json"), "nothing written")
        try playground.write("basket-sync.json", "{\"cart\": \"host/cart.json\"}")
        let folder = try run(playground, ["apply"])
        #expect(folder.status == 66 && folder.stderr.contains("a missing cart is not an empty cart"), "a missing folder is a missing cart: \(folder.stderr)")
    }

    /// maxQuantity never makes a cart basket-sync rejects: Mealz's increase past it is recorded
    /// cut at the source (the host cart as known), and apply holds a line the shopper raised
    /// since at the limit — every apply and every pass goes through.
    @Test func maxQuantityNeverLeavesApplyStuck() throws {
        let playground = try syncDirectory()
        try playground.write("basket-sync.json", "{\"limits\": {\"maxQuantity\": 10}}")
        try playground.write("cart.json", cartJSON([("A", 10)], syncedThrough: 0))
        #expect(try run(playground, ["sync"]).status == 0)
        #expect(try run(playground, ["push", "A=+1"]).status == 0)
        let pass = try run(playground, ["sync"])
        #expect(pass.status == 0)
        #expect(playground.records("outbox.jsonl").isEmpty, "A is at the limit: nothing to record")
        #expect(pass.stderr.contains("Mealz asked \"A\" +1, which would take the host's cart past maxQuantity 10"), "reported: \(pass.stderr)")
        #expect(try run(playground, ["apply"]).status == 0)
        #expect(try run(playground, ["sync"]).status == 0)

        try playground.write("cart.json", cartJSON([("A", 8)], syncedThrough: 0))
        #expect(try run(playground, ["sync"]).status == 0)
        #expect(try run(playground, ["push", "A=+5"]).status == 0)
        #expect(try run(playground, ["sync"]).status == 0)
        #expect((playground.records("outbox.jsonl").last?["products"] as? [[String: Any]])?.first?["quantity"] as? Int == 2, "cut to land at 10")
        // The shopper raises A to 9 before the host applies: +2 would be 11.
        try playground.write("cart.json", cartJSON([("A", 9)], syncedThrough: 0))
        let applied = try run(playground, ["apply", "--json"])
        #expect(applied.status == 0 && applied.stdout.contains("\"clampedAtLimit\":[\"A\"]"), "\(applied)")
        #expect(playground.read("cart.json").contains("{\"id\":\"A\",\"quantity\":10}"), "\(playground.read("cart.json"))")
        #expect(try run(playground, ["sync"]).status == 0, "the cart apply wrote is taken")
        #expect(try run(playground, ["apply"]).status == 0)
    }

    /// maxFileBytes never makes a cart basket-sync rejects either: apply whose records would
    /// take the cart past it refuses (65), says what to do and writes nothing; with the limit
    /// raised, the same apply goes through and its cart is taken.
    @Test func applyNeverWritesACartOverTheSizeLimit() throws {
        let playground = try syncDirectory()
        let cart = cartJSON([(String(repeating: "a", count: 40), 1), (String(repeating: "b", count: 40), 1)], syncedThrough: 0)
        try playground.write("basket-sync.json", "{\"limits\": {\"maxFileBytes\": \(cart.utf8.count + 20)}}")
        try playground.write("cart.json", cart)
        #expect(try run(playground, ["sync"]).status == 0)
        #expect(try run(playground, ["push", String(repeating: "c", count: 40) + "=+1"]).status == 0)
        #expect(try run(playground, ["sync"]).status == 0)
        let refused = try run(playground, ["apply"])
        #expect(refused.status == 65 && refused.stderr.contains("cart.json:1:1: with the records applied (through #1) the cart would be ")
                && refused.stderr.contains("over limits.maxFileBytes (\(cart.utf8.count + 20))") && refused.stderr.contains("nothing written"), "\(refused)")
        #expect(playground.read("cart.json") == cart, "the cart untouched")
        #expect(try run(playground, ["sync"]).status == 0, "the host's cart is still taken")
        try playground.write("basket-sync.json", "{\"limits\": {\"maxFileBytes\": 4096}}")
        #expect(try run(playground, ["apply"]).status == 0)
        #expect(try run(playground, ["sync"]).status == 0, "the cart apply wrote is taken")
    }

    @Test func applyTurnsABareArrayCartIntoAnObjectAndRefusesABrokenCart() throws {
        let playground = try syncDirectory()
        try playground.write("cart.json", "[{\"id\": \"A\", \"quantity\": 1}]")
        _ = try run(playground, ["push", "A=+1"])
        _ = try run(playground, ["sync"])
        #expect(try run(playground, ["apply"]).status == 0)
        #expect(playground.read("cart.json") == """
            {
              "products": [
                {"id":"A","quantity":2}
              ],
              "syncedThrough": 1
            }

            """)
        try playground.write("cart.json", "{\"products\": [{\"id\": \"A\", \"quantity\": \"two\"}]}")
        _ = try run(playground, ["push", "A=+1"])
        let broken = try run(playground, ["apply"])
        #expect(broken.status == 65)
        #expect(broken.stderr.contains("cart.json:1:39: \"quantity\" must be a whole number, not a string"))
        #expect(playground.read("cart.json").contains("\"two\""), "a broken cart is left as it is")
    }

    @Test func renamedCartKeysAreUsedByApplyAndValidate() throws {
        let playground = try syncDirectory()
        try playground.write("basket-sync.json", "{\"keys\": {\"products\": \"items\", \"id\": \"sku\", \"quantity\": \"qty\"}}")
        try playground.write("cart.json", "{\"items\": [{\"sku\": \"A\", \"qty\": 1}]}")
        _ = try run(playground, ["push", "A=+1", "B=+2"])
        _ = try run(playground, ["sync"])
        #expect(try run(playground, ["apply"]).status == 0)
        let cart = try JSONSerialization.jsonObject(with: Data(playground.read("cart.json").utf8)) as! [String: Any]
        #expect((cart["items"] as! [[String: Any]]).map { "\($0["sku"]!)=\($0["qty"]!)" } == ["A=2", "B=2"])
        _ = try run(playground, ["sync"])
        #expect(playground.records("notifications.jsonl").last.map(products) == ["A": 2, "B": 2])
    }

    @Test func syncedThroughCanBeRenamedForAFixedFormat() throws {
        let playground = try syncDirectory()
        try playground.write("basket-sync.json", "{\"keys\": {\"products\": \"items\", \"id\": \"sku\", \"quantity\": \"qty\", \"syncedThrough\": \"progress\"}}")
        try playground.write("cart.json", "{\"cartId\": \"c-1\", \"items\": [{\"sku\": \"X\", \"qty\": 1, \"label\": \"bread\"}], \"progress\": 0}")
        _ = try run(playground, ["push", "A=+2"])
        _ = try run(playground, ["sync"])
        #expect(try run(playground, ["apply"]).status == 0)
        let cart = try JSONSerialization.jsonObject(with: Data(playground.read("cart.json").utf8)) as! [String: Any]
        #expect(cart["progress"] as? Int == 1, "\(cart)")
        #expect(cart["syncedThrough"] == nil, "the host's own key only")
        #expect(cart["cartId"] as? String == "c-1")
        _ = try run(playground, ["sync"])
        let status = try run(playground, ["status", "--json"])
        let report = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as! [String: Any]
        #expect(report["syncedThrough"] as? Int == 1, "the agent reads the acknowledgement under its new name: \(status.stdout)")
        #expect(playground.records("notifications.jsonl").last?["syncedThrough"] as? Int == 1)
        #expect(try run(playground, ["validate", "cart.json"]).status == 0)
        try playground.write("cart.json", "{\"items\": [], \"progress\": \"one\"}")
        #expect(try run(playground, ["validate", "cart.json"]).stdout.contains("\"progress\" must be the highest outbox seq processed"))

        try playground.write("basket-sync.json", "{\"keys\": {\"syncedThrough\": \"products\"}}")
        let clash = try run(playground, ["sync"])
        #expect(clash.status == 78)
        #expect(clash.stderr.contains("\"keys\" names products and syncedThrough both \"products\""), "\(clash.stderr)")
    }

    /// The cart setting cannot name basket-sync's own files; a cart
    /// whose folder is not there is a missing cart, not an error.
    @Test func theCartSettingNamesTheHostsCartOnly() throws {
        let playground = try syncDirectory()
        for cart in ["outbox.jsonl", "payments.jsonl", "basket-sync.json", ".basket-sync/state.db", "inbox/new/c.json", ".", "a//b", "./cart.json"] {
            try playground.write("basket-sync.json", "{\"cart\": \"\(cart)\"}")
            let run = try run(playground, ["sync"])
            #expect(run.status == 78, "\(cart): \(run.stderr)")
        }
        try playground.write("basket-sync.json", "{\"cart\": \"host/cart.json\"}")
        let missing = try run(playground, ["sync"])
        #expect(missing.status == 0, "\(missing.stderr)")
        #expect(missing.stdout.hasPrefix("cart missing;"))
        // A file where the cart's folder should be is named as such.
        try playground.write("host", "not a folder")
        let notFolder = try run(playground, ["sync"])
        #expect(notFolder.status == 65 && notFolder.stderr.contains("its folder \(playground.path)/host is a regular file, not a directory"), "\(notFolder.stderr)")
        try FileManager.default.removeItem(atPath: playground.path + "/host")
        // With followSymlinks, a cart that is a link to basket-sync's own file.
        try playground.write("basket-sync.json", "{\"followSymlinks\": true}")
        _ = try run(playground, ["push", "A=+1"])
        _ = try run(playground, ["sync"])
        let outbox = playground.read("outbox.jsonl")
        for target in ["outbox.jsonl", ".basket-sync/state.db", "inbox/new"] {
            try? FileManager.default.removeItem(atPath: playground.path + "/cart.json")
            try FileManager.default.createSymbolicLink(atPath: playground.path + "/cart.json", withDestinationPath: playground.path + "/" + target)
            let sync = try run(playground, ["sync"])
            #expect(sync.status == 65 && sync.stderr.contains("one of basket-sync's own files"), "\(target): \(sync.stderr)")
            let apply = try run(playground, ["apply"])
            #expect(apply.status == 65 && apply.stderr.contains("apply writes only the host's cart"), "\(target): \(apply.stderr)")
        }
        #expect(playground.read("outbox.jsonl") == outbox, "the outbox is never read or written as a cart")
        try FileManager.default.removeItem(atPath: playground.path + "/cart.json")
        let products = try run(playground, ["payment-started", "--total", "1", "--products", "nowhere.json"])
        #expect(products.stderr.contains("with -C, a relative FILE is relative to the sync directory") || products.stdout.contains("skipped"), "\(products.stderr)")
    }

    @Test func paymentsNeedRetailerModeAndAStoreAndAreRecordedOncePerOrder() throws {
        let playground = try syncDirectory()
        try playground.write("cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        _ = try run(playground, ["push", "A=+2"])
        _ = try run(playground, ["sync"])
        _ = try run(playground, ["apply"])
        _ = try run(playground, ["sync"])

        let early = try run(playground, ["payment-started", "--total", "12.30"])
        #expect(early.status == 0, "paymentStarted is best-effort")
        #expect(early.stdout.contains("\"status\":\"skipped\",\"reason\":\"notRetailerMode\""))
        let refused = try run(playground, ["handle-payment", "--total", "12.30", "--order-id", "o-1", "--then", "touch", playground.path + "/completed"])
        #expect(refused.status == 78)
        #expect(refused.stderr.contains("set-store STORE_ID --mode retailer"))
        #expect(!FileManager.default.fileExists(atPath: playground.path + "/completed"), "no completion without a record")

        #expect(try run(playground, ["set-store", "store-42", "--mode", "retailer"]).stdout == "store store-42, retailer mode, Mealz basket 1\n")
        let started = try run(playground, ["payment-started", "--total", "12.30", "--order-id", "o-1"])
        #expect(started.stdout.contains("\"status\":\"recorded\",\"storeId\":\"store-42\",\"orderId\":\"o-1\",\"totalPrice\":\"12.30\""))
        #expect(started.stdout.contains("\"mealzProducts\":[{\"id\":\"A\",\"quantity\":2}]"))

        let paid = try run(playground, ["handle-payment", "--total", "12.30", "--order-id", "o-1", "--then", "touch", playground.path + "/completed"])
        #expect(paid.status == 0, "\(paid.stderr)")
        #expect(paid.stdout.contains("\"type\":\"handlePayment\""))
        #expect(FileManager.default.fileExists(atPath: playground.path + "/completed"))
        let again = try run(playground, ["handle-payment", "--total", "12.30", "--order-id", "o-1"])
        #expect(again.stdout == "order o-1 was already recorded as payment #3; not recorded again (a duplicate)\n")

        let payments = playground.records("payments.jsonl")
        #expect(payments.map { $0["type"] as! String } == ["paymentStarted", "paymentStarted", "handlePayment"])
        #expect(payments.filter { $0["orderId"] as? String == "o-1" && $0["type"] as? String == "handlePayment" }.count == 1)
        #expect(payments.allSatisfy { $0["totalPrice"] as? String == "12.30" }, "money keeps its digits")
    }

    @Test func theCompletionRunsWithoutAShellAndItsFailureIsReported() throws {
        let playground = try syncDirectory()
        _ = try run(playground, ["set-store", "s", "--mode", "retailer"])
        try playground.write("bought.json", "[{\"id\": \"X\", \"quantity\": 1}]")
        let marker = playground.path + "/not-created"
        let literal = try run(playground, ["handle-payment", "--total", "1", "--order-id", "o-2", "--products", playground.path + "/bought.json", "--then", "sh", "-c", "exit 3", "; touch \(marker)"])
        #expect(literal.status == 3)
        #expect(literal.stderr.contains("the completion sh exited with status 3; the payment stays recorded"))
        #expect(!FileManager.default.fileExists(atPath: marker), "arguments are never given to a shell")
        #expect(playground.records("payments.jsonl").last?["reason"] as? String == "noMealzProduct")
    }

    @Test(arguments: ["42,50", "-1", "1e3", "4.2.0", ""])
    func aTotalThatIsNotAnExactAmountIsAUsageError(total: String) throws {
        let playground = try syncDirectory()
        let run = try run(playground, ["payment-started", "--total", total])
        #expect(run.status == 64)
        #expect(run.stderr.contains("--total \(total) is not an amount; write digits with a point for the cents, such as 42.50"))
        #expect(playground.records("payments.jsonl").isEmpty)
    }

    @Test func productsCanComeFromStandardInput() throws {
        let playground = try syncDirectory()
        _ = try run(playground, ["set-store", "s", "--mode", "retailer"])
        let process = Child()
        process.executableURL = binary
        process.arguments = ["-C", playground.path, "payment-started", "--total", "3.00", "--products", "-"]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        input.fileHandleForWriting.write(Data("[{\"id\": \"Z\", \"quantity\": 3}]".utf8))
        try input.fileHandleForWriting.close()
        process.waitUntilExit()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(text.contains("\"products\":[{\"id\":\"Z\",\"quantity\":3}]"))
    }

    @Test func theStoreSurvivesAndAChangeStartsANewBasket() throws {
        let playground = try syncDirectory()
        #expect(try run(playground, ["set-store", "a", "--mode", "retailer", "--json"]).stdout == "{\"storeId\":\"a\",\"mode\":\"retailer\",\"basket\":1}\n")
        #expect(try run(playground, ["set-store", "b", "--json"]).stdout == "{\"storeId\":\"b\",\"mode\":\"retailer\",\"basket\":2}\n")
        #expect(try run(playground, ["status"]).stdout.contains("store: b (retailer mode), Mealz basket 2"))
        #expect(try run(playground, ["set-store", "b", "--mode", "sideways"]).status == 64)
    }

    /// Every `--json` output goes through the JSON writer: ids with quotes, backslashes and
    /// non-ASCII come out as valid JSON that reads back to the same values.
    @Test func jsonOutputsAreValidJSONWhateverTheIdsHold() throws {
        let playground = try Playground()
        _ = try run(playground, ["init"])
        for store in ["st\"x", "a\\b", "é\u{301}/\u{2028}", "{\"storeId\":1}"] {
            let result = try run(playground, ["set-store", store, "--json"])
            #expect(result.status == 0, "\(result.stderr)")
            let object = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
            #expect(object?["storeId"] as? String == store, "\(result.stdout)")
            #expect(object?["mode"] as? String == "standalone")
        }
        _ = try run(playground, ["push", "--id", "e\"1", "A=+2"])
        let sync = try run(playground, ["sync", "--json"])
        let synced = try JSONSerialization.jsonObject(with: Data(sync.stdout.utf8)) as? [String: Any]
        #expect((synced?["inbox"] as? [String: Any])?["taken"] as? Int == 1, "\(sync.stdout)")
        try playground.write("cart.json", "[]")
        let apply = try run(playground, ["apply", "--json"])
        let applied = try JSONSerialization.jsonObject(with: Data(apply.stdout.utf8)) as? [String: Any]
        #expect(applied?["applied"] as? [Int] == [1] && applied?["syncedThrough"] as? Int == 1, "\(apply.stdout)")
        let status = try run(playground, ["status", "--json"])
        #expect((try? JSONSerialization.jsonObject(with: Data(status.stdout.utf8))) != nil, "\(status.stdout)")
    }

    @Test func validateReportsEveryProblemOfEveryFile() throws {
        let playground = try syncDirectory()
        try playground.write("cart.json", "{\"products\": [\n  {\"id\": \"\", \"quantity\": -1},\n  {\"id\": \"b\"}\n]}")
        try playground.write("good.json", "[{\"id\": \"b\", \"quantity\": 1}]")
        try playground.write("inbox/bad/e1", "{\"id\": \"e1\", \"type\": \"basketDelta\"}")
        let result = try run(playground, ["validate", "cart.json", "good.json", "inbox/bad/e1", "basket-sync.json"])
        #expect(result.status == 65)
        #expect(result.stdout == """
            cart.json:2:10: "id" is empty; give a non-empty id
            cart.json:2:26: "quantity" is -1; an absolute quantity must be 0 or more
            cart.json:3:3: this line has no "quantity"; add one
            good.json: valid
            inbox/bad/e1:1:1: the event has no "products" list; add one
            basket-sync.json: valid

            """)
        #expect(try run(playground, ["validate", "missing.json"]).status == 66)
        // A file that cannot be read is said, and the files after it checked all the same.
        let some = try run(playground, ["validate", "good.json", "missing.json", "cart.json"])
        #expect(some.status == 66 && some.stderr.contains("missing.json: no such file"), "\(some.status) \(some.stderr)")
        #expect(some.stdout.hasPrefix("good.json: valid\ncart.json:2:10: "), "\(some.stdout)")
    }

    /// A file of the sync directory is judged as basket-sync reads it there: whatever its shape,
    /// `validate` says it valid exactly when `sync` takes it — a cart or an inbox entry that is a
    /// symbolic link (to a valid file inside or outside) is not, nor is its target read; with
    /// "followSymlinks" a cart's link is followed by both. A file outside the directory is the
    /// user's own, its link followed; a FIFO or a device is refused, said as what it is.
    @Test(arguments: ["regular", "link inside", "link outside", "dangling link", "FIFO", "device link", "directory"], [false, true])
    func validateJudgesAFileOfTheDirectoryAsSyncTakesIt(shape: String, followSymlinks: Bool) throws {
        let playground = try syncDirectory()
        if followSymlinks { try playground.write("basket-sync.json", #"{"followSymlinks": true}"#) }
        let outside = try Playground()
        let cart = cartJSON([("A", 1)])
        let event = #"{"id":"e1","type":"basketDelta","products":[{"id":"A","quantity":1}]}"#
        try outside.write("cart.json", cart)
        try outside.write("event", event)
        for (name, valid) in [("cart.json", cart), ("inbox/new/e1", event)] {
            let path = playground.path + "/" + name
            switch shape {
            case "regular": try playground.write(name, valid)
            case "link inside":
                let target = name == "cart.json" ? "target-cart" : "target-event"
                try playground.write(target, valid)
                try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: "\(playground.path)/\(target)")
            case "link outside": try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: outside.path + "/" + (name == "cart.json" ? "cart.json" : "event"))
            case "dangling link": try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: "/nonexistent/basket-sync")
            case "FIFO": #expect(mkfifo(path, 0o644) == 0)
            case "device link": try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: "/dev/zero")
            default: try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            }
        }
        let statuses = ["cart.json", "inbox/new/e1"].map { name in (try? run(playground, ["validate", name]))?.status ?? -1 }
        let validated = statuses.map { $0 == 0 }
        let sync = try run(playground, ["sync"])
        let cartTaken = sync.status == 0 && !sync.stderr.contains("cart.json")
        let eventTaken = FileManager.default.fileExists(atPath: playground.path + "/inbox/cur/e1")
        let context = "\(shape), followSymlinks \(followSymlinks): validate \(validated), sync \(sync.status) \(sync.stderr)"
        if shape == "dangling link" && followSymlinks {
            // Followed, it leads nowhere: no cart, to sync as to validate (66).
            #expect(statuses[0] == 66 && sync.status == 0, "the cart: \(context)")
        } else {
            #expect(validated[0] == cartTaken, "the cart: \(context)")
        }
        #expect(validated[1] == eventTaken, "the inbox entry: \(context)")
        #expect(validated[0] == (shape == "regular" || followSymlinks && shape.hasPrefix("link")), "\(context)")
        // Outside the directory, a link is the user's own and followed; a FIFO is said as what it is.
        let linked = outside.path + "/linked.json"
        try FileManager.default.createSymbolicLink(atPath: linked, withDestinationPath: outside.path + "/cart.json")
        #expect(try run(playground, ["validate", linked]).status == 0)
        #expect(mkfifo(outside.path + "/fifo", 0o644) == 0)
        let fifo = try run(playground, ["validate", outside.path + "/fifo"])
        #expect(fifo.status == 65 && fifo.stdout.contains("is a FIFO, not a regular file; validate reads regular files (or standard input, -)"), "\(fifo.stdout)")
    }

    /// A file of the sync directory reached through one of its folders that is a link — the
    /// cart's folder, `inbox/new`, a tree's cart folder — is judged by the path as written, as
    /// `sync` reaches it: `validate` says it valid exactly when `sync` takes it (the cart's folder
    /// link followed with "followSymlinks" only, the inbox's and a tree cart's never), whether
    /// the path is given from the directory, from elsewhere, or absolute.
    @Test(arguments: [false, true])
    func validateJudgesAFileBehindALinkedFolderOfTheDirectoryAsSyncDoes(followSymlinks: Bool) throws {
        let outside = try Playground()
        for folder in ["host", "new"] { try FileManager.default.createDirectory(atPath: outside.path + "/" + folder, withIntermediateDirectories: false) }
        try outside.write("host/cart.json", cartJSON([("A", 1)]))
        try outside.write("new/e1", #"{"id":"e1","type":"basketDelta","products":[{"id":"A","quantity":1}]}"#)

        // The cart's folder is a link out of the directory.
        let cartSide = try Playground()
        #expect(try basketSync(["-C", cartSide.path, "init"]).status == 0)
        try cartSide.write("basket-sync.json", #"{"cart": "host/cart.json", "followSymlinks": \#(followSymlinks)}"#)
        try FileManager.default.createSymbolicLink(atPath: cartSide.path + "/host", withDestinationPath: outside.path + "/host")
        let sync = try run(cartSide, ["sync"])
        let cartTaken = sync.status == 0 && !sync.stderr.contains("cart.json")
        #expect(cartTaken == followSymlinks, "sync: \(sync.status) \(sync.stderr)")
        for spelling in ["host/cart.json", "./host/./cart.json", cartSide.path + "/host/cart.json"] {
            let validate = try run(cartSide, ["validate", spelling])
            #expect((validate.status == 0) == cartTaken, "\(spelling), followSymlinks \(followSymlinks): \(validate.status) \(validate.stdout)\(validate.stderr)")
        }
        // A `..` after the linked folder is the kernel's: the parent of where the link leads,
        // out of the directory — the file read and judged is that one, the user's (the link is
        // the user's own; another account's is never followed: TrustTests).
        try outside.write("cart.json", "{not json")
        let dotDot = try run(cartSide, ["validate", "host/../cart.json"])
        #expect(dotDot.status == 65 && dotDot.stdout.contains("host/../cart.json:1:2: unexpected"), "\(dotDot.status) \(dotDot.stdout)\(dotDot.stderr)")
        #expect(try run(cartSide, ["validate", "host/../host/cart.json"]).status == 0, "the link's target's own cart, outside: the user's")
        let fromElsewhere = try basketSync(["-C", cartSide.path, "validate", cartSide.path + "/host/cart.json"])
        #expect((fromElsewhere.status == 0) == cartTaken, "\(fromElsewhere.stdout)\(fromElsewhere.stderr)")
        // The directory named through a link of its own (-C LINK): the same directory, the same files.
        let linkToDirectory = outside.path + "/to-the-directory"
        try FileManager.default.createSymbolicLink(atPath: linkToDirectory, withDestinationPath: cartSide.path)
        for spelling in ["host/cart.json", linkToDirectory + "/host/cart.json"] {
            let validate = try basketSync(["-C", linkToDirectory, "validate", spelling])
            #expect((validate.status == 0) == cartTaken, "-C through a link, \(spelling), followSymlinks \(followSymlinks): \(validate.status) \(validate.stdout)\(validate.stderr)")
        }

        // inbox/new is a link out of the directory: never made through, nor read.
        let inboxSide = try syncDirectory()
        if followSymlinks { try inboxSide.write("basket-sync.json", #"{"followSymlinks": true}"#) }
        try FileManager.default.removeItem(atPath: inboxSide.path + "/inbox/new")
        try FileManager.default.createSymbolicLink(atPath: inboxSide.path + "/inbox/new", withDestinationPath: outside.path + "/new")
        let linkToInboxSide = outside.path + "/to-the-inbox-side"
        try FileManager.default.createSymbolicLink(atPath: linkToInboxSide, withDestinationPath: inboxSide.path)
        for (directory, spelling) in [(inboxSide.path, "inbox/new/e1"), (inboxSide.path, inboxSide.path + "/inbox/new/e1"), (linkToInboxSide, "inbox/new/e1")] {
            let validate = try basketSync(["-C", directory, "validate", spelling])
            #expect(validate.status == 65 && validate.stdout.contains("inbox/new: is a symbolic link, not a directory"), "\(spelling): \(validate.status) \(validate.stdout)\(validate.stderr)")
        }
        _ = try run(inboxSide, ["sync"])
        #expect(FileManager.default.fileExists(atPath: outside.path + "/new/e1") && !FileManager.default.fileExists(atPath: inboxSide.path + "/inbox/cur/e1"), "sync took nothing through the link")

        // A tree's cart folder that is a link is no cart of the tree: refused, never read.
        let tree = try Playground()
        #expect(try basketSync(["-C", tree.path, "init", "--tree"]).status == 0)
        if followSymlinks {
            let configuration = try String(contentsOfFile: tree.path + "/basket-sync.json", encoding: .utf8)
            try tree.write("basket-sync.json", configuration.replacingOccurrences(of: #""followSymlinks": false"#, with: #""followSymlinks": true"#))
        }
        try FileManager.default.createSymbolicLink(atPath: tree.path + "/c1", withDestinationPath: outside.path + "/host")
        let treeCart = try run(tree, ["validate", "c1/cart.json"])
        #expect(treeCart.status == 65 && treeCart.stdout.contains("c1: is a symbolic link, not a directory"), "\(treeCart.status) \(treeCart.stdout)\(treeCart.stderr)")

        // Run from a folder that is no sync directory, every file is the user's: its links followed.
        let user = try Playground()
        try FileManager.default.createSymbolicLink(atPath: user.path + "/linked", withDestinationPath: outside.path + "/host")
        let mine = try basketSync(["-c", "cd \"$1\" && \"$0\" validate \"$1/linked/cart.json\" linked/cart.json", binary.path, user.path], executable: "/bin/sh")
        #expect(mine.status == 0 && mine.stdout.components(separatedBy: ": valid").count == 3, "\(mine.status) \(mine.stdout)\(mine.stderr)")
    }

    /// A file that lies in a sync directory or a tree is that directory's, wherever it is named
    /// from — `-C` elsewhere, a working directory inside its inbox, the tree's parent: judged
    /// under its settings (here a tree's maxQuantity of 3) and its rules (its configuration's
    /// owner and mode), as the agent judges it.
    @Test func aFileInASyncDirectoryIsJudgedByItWhereverItIsNamedFrom() throws {
        let parent = try Playground()
        let root = parent.path + "/tree"
        #expect(try basketSync(["-C", root, "init", "--tree"]).status == 0)
        let configuration = try String(contentsOfFile: root + "/basket-sync.json", encoding: .utf8)
        try parent.write("tree/basket-sync.json", configuration.replacingOccurrences(of: #""maxQuantity": 1000000"#, with: #""maxQuantity": 3"#))
        #expect(try basketSync(["-C", root + "/c1", "init"]).status == 0)
        try parent.write("tree/c1/cart.json", cartJSON([("A", 5)]))
        try parent.write("tree/c1/inbox/new/e1", #"{"id":"e1","type":"basketDelta","products":[{"id":"A","quantity":5}]}"#)
        let elsewhere = try Playground()
        for (from, file) in [(parent.path, "tree/c1/cart.json"), (root + "/c1/inbox/new", "e1"), (elsewhere.path, root + "/c1/inbox/new/e1"), (root + "/c1", "cart.json")] {
            let run = try basketSync(["-c", "cd \"$1\" && \"$0\" validate \"$2\"", binary.path, from, file], executable: "/bin/sh")
            #expect(run.status == 65 && run.stdout.contains("3"), "from \(from), \(file): \(run.status) \(run.stdout)\(run.stderr)")
        }
        #expect(chmod(root + "/basket-sync.json", 0o664) == 0)
        let refused = try basketSync(["-c", "cd \"$1\" && \"$0\" validate tree/basket-sync.json", binary.path, parent.path], executable: "/bin/sh")
        #expect(refused.status == 78 && refused.stderr.contains("writable by its group"), "\(refused.status) \(refused.stdout)\(refused.stderr)")
    }

    /// Standard input is read as it comes: past the limit it is refused without being read to
    /// its end (an endless stream), and said as more than the limit, never a size it did not know.
    @Test func anEndlessStandardInputIsRefusedAsMoreThanTheLimit() throws {
        let playground = try syncDirectory()
        try playground.write("basket-sync.json", #"{"limits": {"maxFileBytes": 4096}}"#)
        let validate = try basketSync(["-c", "yes | \"$0\" -C \"$1\" validate -", binary.path, playground.path], executable: "/bin/sh")
        #expect(validate.status == 65 && validate.stderr.contains("standard input: more than 4096 bytes is over the limit of 4096"), "\(validate.status) \(validate.stdout) \(validate.stderr)")
    }

    /// A cart whose lines of one id add up past the limit, each line within it, is not valid to
    /// `validate`, as a pass refuses it: what validate says, the commands do — at the largest
    /// limit too (2^53 − 1), where the sum is refused before it could overflow.
    @Test func validateRefusesLinesThatAddUpPastTheLimitAsAPassDoes() throws {
        let playground = try syncDirectory()
        try playground.write("basket-sync.json", #"{"limits": {"maxQuantity": 9007199254740991}}"#)
        let line = #"{"id": "big", "quantity": 9007199254740991}"#
        try playground.write("cart.json", #"{"products": ["# + Array(repeating: line, count: 1_025).joined(separator: ",") + "]}")
        let validate = try run(playground, ["validate", "cart.json"])
        #expect(validate.status == 65 && validate.stdout.contains(#""big" adds up to 18014398509481982 over its lines with this one"#), "\(validate.status) \(validate.stdout)")
        let sync = try run(playground, ["sync"])
        #expect(sync.status == 65 && sync.stderr.contains(#""big" adds up to 18014398509481982"#), "\(sync.status) \(sync.stderr)")
        try playground.write("cart.json", #"{"products": [{"id": "big", "quantity": 9007199254740990}, {"id": "big", "quantity": 1}]}"#)
        #expect(try run(playground, ["validate", "cart.json"]).status == 0, "the limit itself, over two lines")
    }

    /// A configuration over 1 MiB (a long comment), which every command refuses (78), is not
    /// "valid" to validate either: validate reads it with the same limit.
    @Test func validateRefusesAConfigurationEveryCommandRefuses() throws {
        let playground = try syncDirectory()
        try playground.write("basket-sync.json", playground.read("basket-sync.json") + "//" + String(repeating: "x", count: 1_100_000) + "\n")
        let validate = try run(playground, ["validate", "basket-sync.json"])
        #expect(validate.status == 65 && validate.stdout.contains("basket-sync.json:1:1: the configuration is over 1048576 bytes"), "\(validate.status) \(validate.stdout)")
        #expect(try run(playground, ["sync"]).status == 78, "what validate says, the commands do")
    }

    /// The directory's configuration that every command refuses for who may change it — writable
    /// by its group or by others, another account's, in a directory others may write — is not
    /// "valid" to validate: what validate says, the commands do, whatever makes them refuse it.
    /// A cart is then not judged under the defaults instead: the refusal is said (78).
    @Test(arguments: ["group-writable", "world-writable", "another account's", "an open directory"])
    func validateJudgesTheDirectorysConfigurationAsTheCommandsLoadIt(shape: String) throws {
        let playground = try syncDirectory()
        try playground.write("cart.json", cartJSON([("A", 1)]))
        let configuration = playground.path + "/basket-sync.json"
        switch shape {
        case "group-writable": #expect(chmod(configuration, 0o660) == 0)
        case "world-writable": #expect(chmod(configuration, 0o646) == 0)
        case "another account's": #expect(chown(configuration, 65534, 65534) == 0)
        default: #expect(chmod(playground.path, 0o777) == 0)
        }
        let sync = try run(playground, ["sync"])
        #expect(sync.status == 78, "\(shape): \(sync.stderr)")
        for spelling in ["basket-sync.json", configuration] {
            let validate = try run(playground, ["validate", spelling])
            // The very refusal the commands give, with their code.
            #expect(validate.status == 78 && validate.stdout.isEmpty && validate.stderr == sync.stderr, "\(shape), \(spelling): \(validate.status) \(validate.stdout)\(validate.stderr)")
        }
        let cart = try run(playground, ["validate", "cart.json"])
        #expect(cart.status == 78 && cart.stdout.isEmpty && cart.stderr == sync.stderr, "\(shape): \(cart.status) \(cart.stdout)\(cart.stderr)")
        // Its own configuration again, it is valid.
        #expect(chmod(configuration, 0o644) == 0 && chown(configuration, 0, 0) == 0 && chmod(playground.path, 0o755) == 0)
        #expect(try run(playground, ["validate", "basket-sync.json", "cart.json"]).status == 0)
    }
}

extension HostCommandTests {
    @Test func paymentStartedWithUnreadableProductsIsRecordedAsSkipped() throws {
        let playground = try syncDirectory()
        _ = try run(playground, ["set-store", "s", "--mode", "retailer"])
        try playground.write("bought.json", "{\"products\": [")
        let started = try run(playground, ["payment-started", "--total", "5", "--products", "bought.json"])
        #expect(started.status == 0, "paymentStarted never fails the host")
        #expect(started.stderr.contains("bought.json:1:15: the file ends in the middle of a value; the payment is recorded as skipped"))
        #expect(playground.records("payments.jsonl").last?["reason"] as? String == "invalidProducts")
        let status = try JSONSerialization.jsonObject(with: Data(try run(playground, ["status", "--json"]).stdout.utf8)) as! [String: Any]
        #expect((status["counters"] as! [String: Int])["paymentsSkipped"] == 1)
        #expect((status["counters"] as! [String: Int])["paymentsRecorded"] == 0)
    }
}

extension HostCommandTests {
    /// `apply` run as root keeps the cart's owner and group, as it keeps its mode: the host is
    /// never locked out of its own cart.
    @Test func applyAsRootKeepsTheCartsOwner() throws {
        guard getuid() == 0 else { return print("applyAsRootKeepsTheCartsOwner: needs root to give a file away; not run") }
        let playground = try syncDirectory()
        try playground.write("cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        #expect(chown(playground.path + "/cart.json", 65534, 65534) == 0 && chmod(playground.path + "/cart.json", 0o600) == 0)
        #expect(try run(playground, ["push", "A=+1"]).status == 0)
        #expect(try run(playground, ["sync"]).status == 0)
        #expect(try run(playground, ["apply"]).status == 0)
        var info = stat()
        #expect(stat(playground.path + "/cart.json", &info) == 0)
        #expect(info.st_uid == 65534 && info.st_gid == 65534 && info.st_mode & 0o7777 == 0o600, "owner \(info.st_uid):\(info.st_gid) mode \(String(info.st_mode & 0o7777, radix: 8))")
        #expect(playground.read("cart.json").contains("\"syncedThrough\": 1") || playground.read("cart.json").contains("\"syncedThrough\":1"), "\(playground.read("cart.json"))")
    }
}

extension HostCommandTests {
    /// `apply` run as root on a cart with set-id bits (a host's, another account's in a shared
    /// directory) never makes a set-id file, not even for an instant: the new cart is made private
    /// (0600), given to the cart's owner, then given the cart's permission bits only — the system
    /// calls are read with strace where it is installed. The cart ends with its permission bits and
    /// its owner, its set-id bits gone.
    @Test func applyAsRootNeverMakesASetIDFile() throws {
        guard getuid() == 0 else { return print("applyAsRootNeverMakesASetIDFile: needs root to give a file away; not run") }
        let playground = try syncDirectory()
        try playground.write("cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        #expect(chown(playground.path + "/cart.json", 65534, 65534) == 0 && chmod(playground.path + "/cart.json", 0o6777) == 0)
        #expect(try run(playground, ["push", "A=+1"]).status == 0)
        #expect(try run(playground, ["sync"]).status == 0)
        let strace = "/usr/bin/strace"
        let log = playground.path + "/strace.log"
        var traced = false
        if FileManager.default.isExecutableFile(atPath: strace) {
            let apply = try basketSync(["-f", "-e", "trace=openat,fchmod,fchown", "-o", log, binary.path, "-C", playground.path, "apply"], executable: strace)
            if apply.stderr.contains("ptrace") {
                print("applyAsRootNeverMakesASetIDFile: strace may not trace here (\(apply.stderr)); the system calls are not read")
                #expect(try run(playground, ["apply"]).status == 0)
            } else {
                #expect(apply.status == 0, "\(apply)")
                traced = true
            }
        } else {
            print("applyAsRootNeverMakesASetIDFile: strace is not installed; the system calls are not read")
            #expect(try run(playground, ["apply"]).status == 0)
        }
        if traced {
            var made = 0
            for line in playground.read("strace.log").split(separator: "\n") {
                // openat(AT_FDCWD, ".../.cart.json.RANDOM.tmp", O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC, 0600) = 5
                if line.contains("openat("), line.contains(".tmp\""), line.contains("O_CREAT") {
                    made += 1
                    let mode = line.components(separatedBy: ", ").last?.split(separator: ")").first.flatMap { UInt32($0, radix: 8) }
                    #expect(mode == 0o600, "the new cart is made private first: \(line)")
                }
                // fchmod(5, 0777) = 0
                if line.contains("fchmod("), let mode = line.components(separatedBy: ", ").last?.split(separator: ")").first.flatMap({ UInt32($0, radix: 8) }) {
                    #expect(mode & 0o7000 == 0, "never a set-id or sticky bit: \(line)")
                }
            }
            #expect(made == 1, "one new cart made: \(playground.read("strace.log"))")
        }
        var info = stat()
        #expect(stat(playground.path + "/cart.json", &info) == 0)
        #expect(info.st_uid == 65534 && info.st_gid == 65534 && info.st_mode & 0o7777 == 0o777, "owner \(info.st_uid):\(info.st_gid) mode \(String(info.st_mode & 0o7777, radix: 8))")
        #expect(playground.read("cart.json").contains("\"syncedThrough\": 1") || playground.read("cart.json").contains("\"syncedThrough\":1"), "\(playground.read("cart.json"))")
    }
}

extension HostCommandTests {
    /// Each error gives the reason that holds: a `basket` of 0 is a number (said as 0), a FIFO
    /// cart is not a link (no word of followSymlinks), a directory given as a program is one (not
    /// "no such program"), an amount of too many digits is too long (not "not an amount").
    @Test func errorsGiveTheReasonThatHolds() throws {
        let playground = try syncDirectory()
        try playground.write("inbox/tmp/s1", #"{"id":"s1","type":"basketState","basket":0,"products":[{"id":"A","quantity":1}]}"#)
        #expect(rename(playground.path + "/inbox/tmp/s1", playground.path + "/inbox/new/s1") == 0)
        _ = try run(playground, ["sync"])
        let said = playground.read("inbox/bad/s1.error")
        #expect(said.contains("\"basket\" must be a whole number from 1 to 9007199254740991") && said.contains("not 0") && !said.contains("not a number"), "\(said)")
        #expect(mkfifo(playground.path + "/cart.json", 0o644) == 0)
        let fifo = try run(playground, ["apply"])
        #expect(fifo.status == 65 && fifo.stderr.contains("is a FIFO") && !fifo.stderr.contains("followSymlinks"), "\(fifo)")
        try FileManager.default.createDirectory(atPath: playground.path + "/tool", withIntermediateDirectories: false)
        let lock = try run(playground, ["lock", "--", playground.path + "/tool"])
        #expect(lock.status == 66 && lock.stderr.contains("not a program (a directory)") && !lock.stderr.contains("no such program"), "\(lock)")
        let total = try run(playground, ["payment-started", "--total", String(repeating: "9", count: 32) + ".99"])
        #expect(total.status == 64 && total.stderr.contains("has 34 digits; an amount holds at most 30"), "\(total)")
    }
}

extension HostCommandTests {
    /// A batch {A:+1} made in a fresh sync directory whose windows last `window` seconds (by
    /// `makeBatch`, which may start an agent), then its echo written as a host does; `check` runs
    /// once the echo went in inside the window. A loaded machine may write it after the window
    /// ended: that attempt proves nothing either way, so it starts over in a fresh directory
    /// instead of deciding on time.
    func withAnEchoInsideTheWindow(_ window: Double, makeBatch: (Playground) async throws -> AgentProcess?,
                                   check: (Playground, Date, AgentProcess?) async throws -> Void) async throws {
        for attempt in 1...4 {
            let playground = try syncDirectory()
            try playground.write("basket-sync.json", #"{"pendingTimeoutSeconds": \#(Int(window))}"#)
            try playground.writeAtomically("cart.json", cartJSON([("X", 1)]))
            #expect(try run(playground, ["sync"]).status == 0)
            #expect(try run(playground, ["push", "A=+1"]).status == 0)
            let agent = try await makeBatch(playground)
            try await eventually("the batch is made") { playground.records("outbox.jsonl").count == 1 }
            let made = try #require(playground.records("outbox.jsonl").first.flatMap(Self.recordTime))
            try playground.write(".cart.tmp", cartJSON([("X", 1), ("A", 1)]))
            #expect(rename(playground.path + "/.cart.tmp", playground.path + "/cart.json") == 0)
            guard Date().timeIntervalSince(made) < window - 0.5 else {
                print("attempt \(attempt): the echo was written \(Date().timeIntervalSince(made)) s after the batch, past its window; starting over")
                _ = agent?.stop()
                continue
            }
            try await check(playground, made, agent)
            return
        }
        Issue.record("the echo never went in inside its window in four attempts: the machine is too loaded to show anything")
    }

    /// When a record says it was made.
    static func recordTime(_ record: [String: Any]) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return (record["at"] as? String).flatMap(formatter.date(from:))
    }

    /// The counters `status --json` gives.
    func counters(_ playground: Playground) throws -> [String: Int] {
        let status = try JSONSerialization.jsonObject(with: Data(try run(playground, ["status", "--json"]).stdout.utf8)) as? [String: Any]
        return status?["counters"] as? [String: Int] ?? [:]
    }

    /// A cron host: its cart written inside a batch's window, the next `sync` run after the window
    /// is over. The cart is judged when it was written (its change time): the batch is echoed in
    /// time — no rollback said, none counted, no late echo.
    @Test func aCartWrittenInTheWindowIsAnEchoInTimeForALaterPass() async throws {
        try await withAnEchoInsideTheWindow(4, makeBatch: { (playground: Playground) async throws -> AgentProcess? in
            #expect(try run(playground, ["sync"]).status == 0)
            return nil
        }, check: { playground, made, _ in
            try await eventually("the window is over") { Date().timeIntervalSince(made) > 4.5 }
            let late = try run(playground, ["sync"])
            #expect(late.status == 0 && !late.stderr.contains("rolled back") && !late.stderr.contains("late"), "\(late)")
            let after = try counters(playground)
            #expect(after["rolledBack"] == 0 && after["lateEchoes"] == 0 && after["settled"] == 1, "\(after)")
        })
    }

    /// The agent's own window timer: a cart written inside the window that the agent has not
    /// taken yet when the window ends (polled, its next look far off — as an event not read yet
    /// after the agent was stopped a while) is taken before the windows are rolled back, so the
    /// batch is echoed in time — no rollback, no late echo.
    @Test func theWindowsTimerTakesACartWrittenInsideItBeforeRollingBack() async throws {
        try await withAnEchoInsideTheWindow(15, makeBatch: { playground in
            let agent = try AgentProcess(directory: playground.path, environment: ["BASKET_SYNC_WATCH_MODE": "poll=3600000"])
            try await agent.waitUntilWatching()
            return agent
        }, check: { playground, _, agent in
            try await eventually("the window's time came", timeout: 120) {
                let now = (try? counters(playground)) ?? [:]
                return (now["settled"] ?? 0) + (now["rolledBack"] ?? 0) > 0
            }
            let after = try counters(playground)
            #expect(after["rolledBack"] == 0 && after["lateEchoes"] == 0 && after["settled"] == 1, "\(after) \(agent?.log ?? "")")
            #expect(agent?.stop() == 0)
        })
    }
}
