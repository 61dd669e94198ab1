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
            "keyBackendReason", "tpmTcti", "masterKey"}. `keyBackend` is where new keys live (software or tpm) \
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
        Status.warnAboutTPMReach(status, globals.console)
    }
}

extension Status {
    /// W11: a store whose keys or master key are reached through a network TCTI is said on stderr (with --json too).
    static func warnAboutTPMReach(_ status: StoreStatus, _ console: Console) {
        for tcti in Set([status.tpmTcti, status.masterKeyTCTI].compactMap { $0 }).sorted() {
            if let warning = TCTIReach.warning(tcti) { console.warn(warning) }
        }
    }
}

/// `status`: `StatusJSON`, or aligned `name  value` lines.
struct StatusOutput: DocumentOutput {
    let status: StoreStatus
    let home: String

    var document: StatusJSON { StatusJSON(status) }

    func text(on console: Console) {
        let lines: [(String, String)] = [
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
        let width = lines.map(\.0.count).max() ?? 0
        console.answer(lines.map { $0.0 + String(repeating: " ", count: width - $0.0.count + 2) + $0.1 }
            .joined(separator: "\n"))
    }
}

extension Status {
    /// Where the master key came from, e.g. "tpm (sealed to swtpm:path=…, blob in /home/master.tpm)".
    static func masterKey(_ status: StoreStatus) -> String {
        let location = status.masterKeyLocation ?? ""
        switch status.masterKeySource {
        case "tpm": return "tpm (sealed to \(status.masterKeyTCTI ?? "?"); blob in \(location))"
        default: return "\(status.masterKeySource) (\(location))"
        }
    }
}
