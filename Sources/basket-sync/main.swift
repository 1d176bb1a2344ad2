import BasketSyncAgent

print("basket-sync \(basketSyncVersion)")
