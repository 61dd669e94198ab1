import Foundation
import Glibc
import Storage

/// Every audit entry is also sent to the systemd journal through its native protocol (a datagram of `NAME=value`
/// fields to /run/systemd/journal/socket, what `sd_journal_send` does; written here by hand, without libsystemd), so
/// that a fleet's existing log shipping (systemd-journal-upload/-remote, rsyslog) carries it off the device. The store
/// stays the source of truth; the journal is a copy that `keymgr audit verify --journal FILE` checks offline.
///
/// Fields: `MESSAGE` (a readable line), `MESSAGE_ID` (one 128-bit id per event type), `PRIORITY`,
/// `SYSLOG_IDENTIFIER=keymgr`, and `KEYMGR_SEQ`, `KEYMGR_EVENT`, `KEYMGR_ACTOR`, `KEYMGR_ACTOR_UID`, `KEYMGR_USER`,
/// `KEYMGR_KID`, `KEYMGR_HASH`, `KEYMGR_PREV_HASH`, plus `KEYMGR_AT`, `KEYMGR_DETAILS` and `KEYMGR_DEVICE`, which the
/// offline check needs to recompute each entry's hash. An audit entry never holds a secret, so neither does this.
/// A journal that is not there (no systemd) or refuses the datagram loses nothing from the store.
package enum AuditJournal {
    /// journald's socket for native messages.
    package static let defaultSocket = "/run/systemd/journal/socket"
    /// For tests only: another socket to send to (one the test listens on), or `off`.
    package static let socketVariable = "KEYMGR_JOURNAL_SOCKET"

    /// Where entries go under `environment`: nil when turned off.
    static func socketPath(_ environment: [String: String]) -> String? {
        guard let path = environment[socketVariable], !path.isEmpty else { return defaultSocket }
        return path == "off" ? nil : path
    }

    /// The MESSAGE_ID of an event type: the first 128 bits of SHA-256("keymgr-audit-event:" + event), in hex, so every
    /// keymgr everywhere gives one event the same id (`journalctl MESSAGE_ID=…` finds it on any device).
    package static func messageID(event: String) -> String {
        Hex.encode(Array(SHA256.hash(Array("keymgr-audit-event:\(event)".utf8)).prefix(16)))
    }

    /// Sends `entries` (committed) to the journal socket, one datagram each. Best effort: a failure is logged by the
    /// caller's logger, never thrown.
    static func send(_ entries: [AuditEventRecord], deviceId: String, processActor: String, path: String) -> String? {
        guard !entries.isEmpty else { return nil }
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return "socket: \(String(cString: strerror(errno)))" }
        defer { close(descriptor) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let pathBytes = Array(path.utf8)
        guard pathBytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return "the socket path is too long" }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in pathBytes.enumerated() { raw[index] = byte }
        }
        for entry in entries {
            let datagram = Self.datagram(entry, deviceId: deviceId, processActor: processActor)
            let sent = datagram.withUnsafeBytes { bytes in
                withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        sendto(descriptor, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL), $0,
                               socklen_t(MemoryLayout<sockaddr_un>.size))
                    }
                }
            }
            if sent < 0 {
                // No journal on this system: nothing to say.
                if errno == ENOENT || errno == ECONNREFUSED { return nil }
                return "\(path): \(String(cString: strerror(errno)))"
            }
        }
        return nil
    }

    /// The native-protocol datagram of one entry: `NAME=value\n` per field, or, for a value holding a newline,
    /// `NAME\n`, its length as a 64-bit little-endian integer, the value and `\n`.
    package static func datagram(_ entry: AuditEventRecord, deviceId: String, processActor: String) -> [UInt8] {
        var out: [UInt8] = []
        func field(_ name: String, _ value: String?) {
            guard let value else { return }
            let bytes = Array(value.utf8)
            out.append(contentsOf: Array(name.utf8))
            if bytes.contains(0x0A) {
                out.append(0x0A)
                withUnsafeBytes(of: UInt64(bytes.count).littleEndian) { out.append(contentsOf: $0) }
            } else {
                out.append(UInt8(ascii: "="))
            }
            out.append(contentsOf: bytes)
            out.append(0x0A)
        }
        field("MESSAGE", message(entry))
        field("MESSAGE_ID", messageID(event: entry.event))
        field("PRIORITY", entry.event == "agent.denied" || entry.event.hasSuffix(".failed") ? "4" : "6")
        field("SYSLOG_IDENTIFIER", "keymgr")
        field("KEYMGR_SEQ", String(entry.seq))
        field("KEYMGR_EVENT", entry.event)
        field("KEYMGR_ACTOR", entry.actor)
        field("KEYMGR_ACTOR_UID", actorUID(entry.actor, processActor: processActor))
        field("KEYMGR_USER", entry.userId)
        field("KEYMGR_KID", entry.kid)
        field("KEYMGR_HASH", entry.hash)
        field("KEYMGR_PREV_HASH", entry.prevHash)
        field("KEYMGR_AT", entry.at)
        field("KEYMGR_DETAILS", entry.details)
        field("KEYMGR_DEVICE", deviceId)
        return out
    }

    /// "key.signed by alice (uid 1001) for carol, key 3f2a1b2c (entry 42)".
    static func message(_ entry: AuditEventRecord) -> String {
        var text = "keymgr audit: \(entry.event) by \(entry.actor)"
        if let userId = entry.userId { text += " for \(userId)" }
        if let kid = entry.kid { text += ", key \(kid.prefix(8))" }
        return text + " (entry \(entry.seq))"
    }

    /// The uid an actor names: "alice (uid 1001)" (the agent's caller) is 1001; this process's own OS user is its
    /// effective uid; anything else has none.
    static func actorUID(_ actor: String, processActor: String) -> String? {
        if actor.hasSuffix(")"), let open = actor.range(of: "(uid ", options: .backwards) {
            let digits = actor[open.upperBound..<actor.index(before: actor.endIndex)]
            if let uid = UInt32(digits) { return String(uid) }
        }
        return actor == processActor ? String(geteuid()) : nil
    }
}
