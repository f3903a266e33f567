-- KEYS: the job's state key, its approval key. Returns the approval record and the job's pause
-- count (``pause_seq``) read together, so a record is never paired with another pause's number.
return {redis.call('GET', KEYS[2]), redis.call('HGET', KEYS[1], 'pause_seq') or '0'}
