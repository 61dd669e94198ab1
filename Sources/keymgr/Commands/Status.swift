import ArgumentParser
import KeyManager

/// `keymgr status`: the device and how much the store holds.
struct Status: KeymgrCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show this device's identity and what the store holds.",
        discussion: """
            `keys` counts usable (active or locked) keys. With --json: \
            {"deviceId", "deviceName", "schemaVersion", "users", "keys", "lastSync", "keyBackend", \
            "keyBackendReason", "tpmTcti", "masterKey", "serverClockSkew"}. "serverClockSkew" lists the server \
            profiles whose clock, as their answers' Date header showed it, is more than 60 s from this device's: \
            [{"server", "seconds"}], seconds the server is ahead (negative: behind). `keyBackend` is where new keys live (software or tpm) \
            and `keyBackendReason` why init chose it. `masterKey` is where this process took the master key from: \
            {"source": "home" | "tpm" | "KEYMGR_MASTER_KEY_FILE" | "systemd-credential", "path", "tcti"} \
            (`tcti` only for a key sealed to a TPM).

            Example:
              keymgr status --json
            """)

    @OptionGroup var globals: GlobalOptions

    func run() throws {
        let manager = try globals.openManager(readOnly: true)
        let status = try manager.status()
        try globals.render(StatusOutput(status: status, home: globals.storeHome.url.path))
    }
}

/// `status`: `StatusJSON`, or aligned `name  value` lines.
struct StatusOutput: DocumentOutput {
    let status: StoreStatus
    let home: String

    var document: StatusJSON { StatusJSON(status) }

    func text(on console: Console) {
        var lines: [(String, String)] = [
            ("home", home),
            ("device id", status.deviceId),
            // MAC'd with the device row, and printed without controls or bidi characters all the same.
            ("device name", TextTable.printable(status.deviceName)),
            ("schema version", String(status.schemaVersion)),
            ("users", String(status.users)),
            ("keys", String(status.keys)),
            ("last sync", status.lastSync.map { HumanText.time($0) } ?? "never"),
            ("key backend", status.keyBackend.rawValue + (status.keyBackendReason.map { " (\($0))" } ?? "")),
        ] + (status.tpmTcti.map { [("tpm tcti", $0)] } ?? []) + [("master key", Status.masterKey(status))]
        for skew in status.serverClockSkews { lines.append(("clock skew", Status.skew(skew))) }
        let width = lines.map(\.0.count).max() ?? 0
        console.answer(lines.map { $0.0 + String(repeating: " ", count: width - $0.0.count + 2) + $0.1 }
            .joined(separator: "\n"))
    }
}

extension Status {
    /// "this device is 600 s behind server default's clock: check its time (timedatectl)".
    static func skew(_ skew: ServerClockSkew) -> String {
        let direction = skew.seconds > 0 ? "behind" : "ahead of"
        return "this device is \(abs(skew.seconds)) s \(direction) server \(TextTable.printable(skew.serverName))'s clock: "
            + "check its time (timedatectl)"
    }

    /// Where the master key came from, e.g. "tpm (sealed to swtpm:path=…, blob in /home/master.tpm)".
    static func masterKey(_ status: StoreStatus) -> String {
        let location = status.masterKeyLocation ?? ""
        switch status.masterKeySource {
        case "tpm": return "tpm (sealed to \(status.masterKeyTCTI ?? "?"); blob in \(location))"
        default: return "\(status.masterKeySource) (\(location))"
        }
    }
}
