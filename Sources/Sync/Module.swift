// Sync module
