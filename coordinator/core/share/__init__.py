"""KIP-932 share groups' pure core: the share-partition delivery state (`partition`, with the
values it takes in `values` and what it persists in `persisted`) and the share group's
membership (ShareGroupHeartbeat / ShareGroupDescribe).
"""
