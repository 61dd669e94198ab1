import ArgumentParser
import Foundation
import KeyManager

/// `keymgr-benchdata`: makes a benchmark store of many users and keys through the KeyManager library
/// (one process and one store open, not one `keymgr bind` process per key).
///
/// Every user gets `--keys-per-user` active keys of auth type NONE, one per issuer (`keymgr`, `keymgr-2`, …),
/// so that none supersedes another. Prints one JSON line on stdout: `{"users","keys","deviceId","seconds"}`.
struct BenchData: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keymgr-benchdata",
        abstract: "Create a keymgr store with many users and keys, for benchmarks.",
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

BenchData.main()
