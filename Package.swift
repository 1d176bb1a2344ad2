// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "basket-sync",
    products: [
        .library(name: "BasketSync", targets: ["BasketSync"]),
        .executable(name: "basket-sync", targets: ["basket-sync"]),
    ],
    targets: [
        // The functional core: the SDK's names and the sync state machine. No I/O, no clock.
        .target(name: "BasketSync"),
        // Pure too: the JSON parser and writer, and each file format's decoder and encoder side by side.
        .target(name: "BasketSyncWire", dependencies: ["BasketSync"]),
        // C libraries from Debian -dev packages, each behind one module map.
        .systemLibrary(name: "CInotifyTools", path: "Sources/CInotifyTools"),
        .systemLibrary(name: "CSQLite", path: "Sources/CSQLite"),
        .systemLibrary(name: "CMalloc", path: "Sources/CMalloc"),
        .systemLibrary(name: "CStatfs", path: "Sources/CStatfs"),
        // The imperative shell: files, inotify, SQLite, signals.
        .target(name: "BasketSyncAgent", dependencies: ["BasketSync", "BasketSyncWire", "CInotifyTools", "CSQLite", "CMalloc", "CStatfs"]),
        // A seeded generator (SplitMix64): check-host and the seeded tests replay a run from its seed.
        .target(name: "Seeded"),
        // The conformance kit (`check-host`): scenarios, the rules, a host model on the library's own rule, the runner.
        .target(name: "BasketSyncHostCheck", dependencies: ["BasketSyncAgent", "BasketSyncWire", "BasketSync", "Seeded"]),
        // Argument parsing and command dispatch only.
        .executableTarget(name: "basket-sync", dependencies: ["BasketSyncAgent", "BasketSyncHostCheck", "BasketSyncWire", "BasketSync"]),
        // The benchmark: `swift run -c release basket-sync-bench`.
        .executableTarget(name: "basket-sync-bench", dependencies: ["basket-sync"]),
        // Samples/swift-host: a host embedding the library directly.
        .executableTarget(name: "swift-host-sample", dependencies: ["BasketSync"], path: "Samples/swift-host", exclude: ["README.md"]),
        // What the seeded tests share: the knobs, and the seeded generator re-exported.
        .target(name: "TestSupport", dependencies: ["Seeded"], path: "Tests/TestSupport"),
        .testTarget(name: "BasketSyncTests", dependencies: ["BasketSync", "TestSupport"]),
        .testTarget(name: "BasketSyncWireTests", dependencies: ["BasketSyncWire", "BasketSync", "TestSupport"]),
        .testTarget(name: "BasketSyncAgentTests", dependencies: ["BasketSyncAgent", "BasketSyncWire", "BasketSync", "TestSupport"]),
        .testTarget(name: "CLITests", dependencies: ["basket-sync", "swift-host-sample", "basket-sync-bench", "TestSupport", "CSQLite"]),
    ],
    swiftLanguageModes: [.v6]
)
