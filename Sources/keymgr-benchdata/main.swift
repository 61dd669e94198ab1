import ArgumentParser
import Foundation
@_spi(Benchmarks) import KeyManager

/// `keymgr-benchdata`: what benchmarks/ needs from inside the library: a store of many users made in one process,
/// and the in-process signature rate.
struct BenchData: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keymgr-benchdata",
        abstract: "Benchmark fixtures and in-process measurements made through the KeyManager library.",
        subcommands: [CreateStore.self, SignRate.self, AuditLog.self, StoreSign.self],
        defaultSubcommand: CreateStore.self)
}

/// Makes a benchmark store of many users and keys through the KeyManager library (one process and one store open,
/// not one `keymgr bind` process per key).
///
/// Every user gets `--keys-per-user` active keys of auth type NONE, one per issuer (`keymgr`, `keymgr-2`, …),
/// so that none supersedes another. Prints one JSON line on stdout: `{"users","keys","deviceId","seconds"}`.
struct CreateStore: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create",
        abstract: "Create a keymgr store with many users and keys, for benchmarks (the default).",
        discussion: """
            The home must not hold a store yet. Run it under eatmydata to skip the per-key fsyncs: the data set \
            is a fixture, not a durability test.

            Example:
              eatmydata keymgr-benchdata --home /tmp/bench-10k --users 10000 --keys-per-user 2
            """)

    @Option(help: ArgumentHelp("The new store's directory.", valueName: "dir"))
    var home: String

    @Option(help: "How many users to create.")
    var users: Int = 10_000

    @Option(help: "Active keys per user (one per issuer).")
    var keysPerUser: Int = 2

    @Option(help: "User ids are this prefix and a zero-padded number.")
    var userPrefix: String = "user"

    @Option(help: "The device name the store records.")
    var deviceName: String = "bench device"

    func validate() throws {
        guard users >= 1 else { throw ValidationError("--users must be 1 or more") }
        guard (1...16).contains(keysPerUser) else { throw ValidationError("--keys-per-user must be from 1 to 16") }
    }

    func run() throws {
        let started = Date()
        var options = InitOptions()
        options.deviceName = deviceName
        let manager = try KeyManager.initialize(home: StoreLocation(url: URL(fileURLWithPath: home)), options: options)
        let issuers = (0..<keysPerUser).map { $0 == 0 ? options.issuer : "\(options.issuer)-\($0 + 1)" }
        let digits = String(users - 1).count
        for index in 0..<users {
            let number = String(index)
            let userId = userPrefix + String(repeating: "0", count: max(0, digits - number.count)) + number
            for issuer in issuers {
                var request = BindRequest(userId: userId)
                request.username = "\(userId)@example.com"
                request.issuer = issuer
                _ = try manager.bind(request, newPIN: { throw KeyManagerError(.usage, "NONE keys take no PIN") })
            }
        }
        let identity = try manager.deviceIdentity()
        let report: [String: Any] = [
            "users": users, "keys": users * keysPerUser, "deviceId": identity.deviceId,
            "seconds": (Date().timeIntervalSince(started) * 1000).rounded() / 1000,
        ]
        let json = try JSONSerialization.data(withJSONObject: report, options: [.sortedKeys])
        FileHandle.standardOutput.write(json + Data("\n".utf8))
    }
}

/// Makes a store whose audit log holds `--entries` entries through the KeyManager library: init, one user bound
/// (NONE), then `key.signed` entries as signatures record them, appended in transactions of 10,000. Prints one JSON
/// line: `{"entries","seconds"}`.
struct AuditLog: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audit-log",
        abstract: "Create a keymgr store with a long audit log, for benchmarks.",
        discussion: """
            Example:
              eatmydata keymgr-benchdata audit-log --home /tmp/bench-audit-1m --entries 1000000
            """)

    @Option(help: ArgumentHelp("The new store's directory.", valueName: "dir"))
    var home: String

    @Option(help: "How many audit entries the log holds in the end (at least 3).")
    var entries: Int = 1_000_000

    func validate() throws {
        guard entries >= 3 else { throw ValidationError("--entries must be 3 or more") }
    }

    func run() throws {
        let started = Date()
        var options = InitOptions()
        options.deviceName = "bench device"
        let manager = try KeyManager.initialize(home: StoreLocation(url: URL(fileURLWithPath: home)), options: options)
        var request = BindRequest(userId: "alice")
        request.username = "alice@example.com"
        let key = try manager.bind(request, newPIN: { throw KeyManagerError(.usage, "NONE keys take no PIN") }).key
        let written = try manager.auditEntries(AuditFilter(newest: 1)).first?.seq ?? 0
        try manager.appendSignedEntriesForBenchmark(userId: key.userId, kid: key.kid, count: entries - Int(written))
        let report: [String: Any] = ["entries": entries, "seconds": (Date().timeIntervalSince(started) * 1000).rounded() / 1000]
        let json = try JSONSerialization.data(withJSONObject: report, options: [.sortedKeys])
        FileHandle.standardOutput.write(json + Data("\n".utf8))
    }
}

/// The in-process signature rate (benchmarks/README.md, the targets: at least half of `openssl speed ecdsap256`): ES256 signatures
/// through `P256PrivateKey.signature(for:)`, the one path every keymgr signature takes. Like keymgr, it imports the
/// private scalar into a fresh OpenSSL key for each signature and erases it after. Prints one JSON line:
/// `{"signatures","seconds","perSecond"}`.
struct SignRate: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sign-rate", abstract: "Count ES256 signatures made in one process for a while.")

    @Option(help: "How long to sign, in seconds.")
    var seconds: Double = 1

    func validate() throws {
        guard seconds > 0, seconds <= 600 else { throw ValidationError("--seconds must be above 0 and at most 600") }
    }

    func run() throws {
        let key = try P256PrivateKey.generate()
        // A JWS signing input of the size `keymgr sign` produces (header and claims, base64url).
        let message = Array(String(repeating: "eyJhbGciOiJFUzI1NiJ9", count: 12).utf8)
        _ = try key.signature(for: message)  // OpenSSL's one-time provider set-up is not a signature's cost
        let clock = ContinuousClock()
        let started = clock.now
        let deadline = started + .milliseconds(Int64(seconds * 1000))
        var signatures = 0
        repeat {
            for _ in 0..<64 { _ = try key.signature(for: message) }
            signatures += 64
        } while clock.now < deadline
        let elapsed = clock.now - started
        let secondsTaken = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let report: [String: Any] = [
            "signatures": signatures, "seconds": secondsTaken, "perSecond": Double(signatures) / secondsTaken,
        ]
        let json = try JSONSerialization.data(withJSONObject: report, options: [.sortedKeys])
        FileHandle.standardOutput.write(json + Data("\n".utf8))
    }
}

/// The in-process part of `keymgr sign` (what a process that is already running, such as the agent's worker, pays):
/// opening the store (unsealing a TPM-sealed master key), then `--count` signatures of a NONE key through
/// `KeyManager.sign`, each with its durable writes (and, on a TPM store, its TPM commands and rollback counter steps).
/// Prints one JSON line: `{"openMs","signMs":[…]}` (milliseconds per signature, in order).
struct StoreSign: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "store-sign", abstract: "Time opening a store and signing with one user's NONE key in one process.")

    @Option(help: ArgumentHelp("The store's directory.", valueName: "dir"))
    var home: String

    @Option(help: "The user whose NONE key signs.")
    var user: String = "alice"

    @Option(help: "How many signatures.")
    var count: Int = 20

    func validate() throws {
        guard (1...10_000).contains(count) else { throw ValidationError("--count must be from 1 to 10000") }
    }

    func run() throws {
        let clock = ContinuousClock()
        func milliseconds(_ duration: Duration) -> Double {
            Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
        }
        let opening = clock.now
        let manager = try KeyManager.open(home: StoreLocation(url: URL(fileURLWithPath: home)), context: .embedded,
                                          environment: ProcessInfo.processInfo.environment)
        let openMs = milliseconds(clock.now - opening)
        var times: [Double] = []
        for index in 0..<count {
            var request = SignRequest(userId: user, kid: nil)
            request.challenge = "bench-challenge-\(index)"
            let started = clock.now
            _ = try manager.sign(request, pin: { throw KeyManagerError(.usage, "a NONE key takes no PIN") })
            times.append(milliseconds(clock.now - started))
        }
        let report: [String: Any] = ["openMs": openMs, "signMs": times]
        let json = try JSONSerialization.data(withJSONObject: report, options: [.sortedKeys])
        FileHandle.standardOutput.write(json + Data("\n".utf8))
    }
}

BenchData.main()
