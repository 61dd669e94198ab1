import Foundation
import GRDB
import KeyManager

// The floor of `keymgr status` on keymgr's own stack (benchmarks/status times it; not installed, not a product
// users run): a static Swift binary with Foundation that opens the store read-only with GRDB, reads the device row
// and the counts in one statement, and proves a MAC key through libcrypto (one HKDF-SHA256 from the master key, one
// HMAC-SHA256) with KeyManager's own crypto calls. No argument parser, no KeyManager facade, no integrity checks,
// no audit: what is left of keymgr's start-up once its own logic is gone. benchmarks/floor/status.c is the same
// work in C.
//
//   keymgr-status-floor DB MASTER_KEY_FILE

let arguments = CommandLine.arguments
guard arguments.count == 3 else {
    FileHandle.standardError.write(Data("usage: keymgr-status-floor DB MASTER_KEY_FILE\n".utf8))
    exit(64)
}
var configuration = Configuration()
configuration.readonly = true
let queue = try DatabaseQueue(path: arguments[1], configuration: configuration)
let row = try queue.read { db in
    try Row.fetchOne(db, sql: """
        SELECT device_id, device_name, (SELECT COUNT(*) FROM users),
               (SELECT COUNT(*) FROM user_keys WHERE status IN ('active', 'locked')),
               (SELECT finished_at FROM sync_state ORDER BY started_at DESC LIMIT 1)
        FROM device WHERE id = 1
        """)
}
guard let row else {
    FileHandle.standardError.write(Data("no device row: not a keymgr store\n".utf8))
    exit(65)
}
let deviceId: String = row[0]
let deviceName: String = row[1]
let master = SecretBytes([UInt8](try Data(contentsOf: URL(fileURLWithPath: arguments[2]))))
let macKey = try HKDF.deriveKey(inputKeyMaterial: master, salt: [], info: Array("keymgr/floor/device".utf8),
                                outputByteCount: 32)
let mac = try HMACSHA256.authenticate(Array((deviceId + deviceName).utf8), key: macKey)
let users: Int = row[2]
let keys: Int = row[3]
let lastSync: String? = row[4]
print("""
    device id    \(deviceId)
    device name  \(deviceName)
    users        \(users)
    keys         \(keys)
    last sync    \(lastSync ?? "never")
    mac bytes    \(mac.count)
    """)
