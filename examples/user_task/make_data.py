"""Writes train.jsonl / test.jsonl for the example (already committed; rerun to regenerate)."""

import json
import random
from pathlib import Path

CAPITALS = """France:Paris|Germany:Berlin|Italy:Rome|Spain:Madrid|Portugal:Lisbon|United Kingdom:London|Ireland:Dublin
Netherlands:Amsterdam|Belgium:Brussels|Switzerland:Bern|Austria:Vienna|Poland:Warsaw|Czech Republic:Prague
Hungary:Budapest|Greece:Athens|Sweden:Stockholm|Norway:Oslo|Denmark:Copenhagen|Finland:Helsinki|Iceland:Reykjavik
Russia:Moscow|Ukraine:Kyiv,Kiev|Romania:Bucharest|Bulgaria:Sofia|Serbia:Belgrade|Croatia:Zagreb|Turkey:Ankara
Egypt:Cairo|Kenya:Nairobi|Nigeria:Abuja|Ethiopia:Addis Ababa|Morocco:Rabat|Algeria:Algiers|Tunisia:Tunis
Ghana:Accra|Senegal:Dakar|South Africa:Pretoria,Cape Town|Uganda:Kampala|Tanzania:Dodoma|Zimbabwe:Harare
Angola:Luanda|Sudan:Khartoum|Libya:Tripoli|China:Beijing,Peking|Japan:Tokyo|South Korea:Seoul|North Korea:Pyongyang
India:New Delhi,Delhi|Pakistan:Islamabad|Bangladesh:Dhaka|Nepal:Kathmandu|Sri Lanka:Colombo,Sri Jayawardenepura Kotte
Thailand:Bangkok|Vietnam:Hanoi|Cambodia:Phnom Penh|Laos:Vientiane|Malaysia:Kuala Lumpur|Singapore:Singapore
Indonesia:Jakarta|Philippines:Manila|Mongolia:Ulaanbaatar,Ulan Bator|Afghanistan:Kabul|Iran:Tehran|Iraq:Baghdad
Syria:Damascus|Lebanon:Beirut|Jordan:Amman|Israel:Jerusalem|Saudi Arabia:Riyadh|Qatar:Doha|Kuwait:Kuwait City
Oman:Muscat|Yemen:Sanaa|United Arab Emirates:Abu Dhabi|Kazakhstan:Astana|Uzbekistan:Tashkent|Georgia:Tbilisi
Armenia:Yerevan|Azerbaijan:Baku|United States:Washington,Washington D.C.|Canada:Ottawa|Mexico:Mexico City
Cuba:Havana|Jamaica:Kingston|Guatemala:Guatemala City|Panama:Panama City|Costa Rica:San Jose,San José
Colombia:Bogota,Bogotá|Venezuela:Caracas|Ecuador:Quito|Peru:Lima|Bolivia:Sucre,La Paz|Chile:Santiago
Argentina:Buenos Aires|Uruguay:Montevideo|Paraguay:Asuncion,Asunción|Brazil:Brasilia,Brasília
Australia:Canberra|New Zealand:Wellington|Fiji:Suva|Papua New Guinea:Port Moresby|Estonia:Tallinn|Latvia:Riga
Lithuania:Vilnius|Belarus:Minsk|Slovakia:Bratislava|Slovenia:Ljubljana|Albania:Tirana|Cyprus:Nicosia|Malta:Valletta
Luxembourg:Luxembourg|Monaco:Monaco|Haiti:Port-au-Prince|Honduras:Tegucigalpa|Nicaragua:Managua
El Salvador:San Salvador"""


def main() -> None:
    pairs = [item.split(":") for line in CAPITALS.splitlines() for item in line.split("|")]
    rows = [{"id": country.lower().replace(" ", "-"), "question": f"What is the capital of {country}?",
             "answer": names.split(",")[0], "aliases": names.split(",")[1:]} for country, names in pairs]
    random.Random(0).shuffle(rows)
    here = Path(__file__).parent
    cut = len(rows) * 3 // 4
    for name, part in (("train", rows[:cut]), ("test", rows[cut:])):
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part)
        (here / f"{name}.jsonl").write_text(text, encoding="utf-8")
    print(f"{cut} train and {len(rows) - cut} test problems")


if __name__ == "__main__":
    main()
